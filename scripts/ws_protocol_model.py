#!/usr/bin/env python3
"""Randomised model of wg_ws_pipeline's stage hand-over
(src/cuda/cuda_mask_gemm_sm90.cuh), run here without a GPU.

The gathering warpgroup (one actor: its 128 threads act alike) waits on
empty[s] for use u - 1 before refilling stage s for use u, issues copies
that land later, in order, and arrive on full[s]; each of the 8 MMA warps
waits on full[s], issues its wgmma group, keeps one group in flight
(wgmma_wait<1>, all groups at each promotion) and releases stage it - 1 on
empty[(it - 1) % STAGES]; in half the runs warps also skip random stages
as forward tile 6 does (no group; earlier groups drained). Groups complete as late as their waits allow, the
adversarial case. Random interleavings of every enabled action are checked
for deadlock, for a warp reading a stage before its fill landed, and for a
refill while a warp's wgmma may still read the stage. Mutations of the
protocol (release stage it instead of it - 1; wait on the wrong empty
phase) make it fail, so it is not vacuous.

Not modelled separately: the forward tiles' bulk copy of the weight tile.
Thread 0 issues it after the same empty[s] wait and after
mbarrier.expect_tx on full[s], before its own arrival, so full[s] cannot
complete a phase without it: to this model it is one more copy of the
stage that lands later. That the expect_tx falls in the right phase needs
the empty wait: empty[s] for use u - 1 completes only after the MMA warps
saw full[s] complete use u - 1.

  scripts/ws_protocol_model.py        # prints "failures 0"
"""
import random
import sys
class MBar:
    def __init__(s, count): s.count=count; s.pending=count; s.phase=0
    def arrive(s):
        s.pending-=1
        if s.pending==0: s.phase+=1; s.pending=s.count
    def done(s, parity):  # phase with this parity completed?
        # try_wait.parity p: true if current phase parity != p (i.e. phase p finished)
        return (s.phase & 1) != parity
def run(iters, STAGES, seed, skip=False):
    rnd=random.Random(seed)
    full=[MBar(1) for _ in range(STAGES)]  # producer modeled as 1 arrival (all 128 threads alike)
    empty=[MBar(8) for _ in range(STAGES)]
    stage_fill=[None]*STAGES   # iteration whose data is in the stage (landed)
    inflight=[]                # copies issued not landed: (stage, it)
    reading={}                 # stage -> set of (warp, it) wgmma in flight reading it
    p_it=0
    cons=[{'it':0,'groups':[] ,'state':'wait'} for _ in range(8)]
    steps=0
    while True:
        steps+=1
        if steps>200000: return 'DEADLOCK'
        actions=[]
        # producer
        if p_it<iters:
            s=p_it%STAGES; use=p_it//STAGES
            if use==0 or empty[s].done((use-1)&1): actions.append('P')
        if inflight: actions.append('L')
        for w,c in enumerate(cons):
            if c['it']<iters:
                s=c['it']%STAGES
                if full[s].done((c['it']//STAGES)&1): actions.append(('C',w))
            elif c['groups']: actions.append(('F',w))
        if not actions:
            if p_it>=iters and all(c['it']>=iters and not c['groups'] for c in cons) and not inflight: return 'ok'
            return 'DEADLOCK'
        a=rnd.choice(actions)
        if a=='P':
            s=p_it%STAGES
            for (st,(w,it)) in [(st,x) for st,xs in reading.items() for x in xs]:
                if st==s: return f'WAR: refill stage {s} for {p_it} while warp {w} reads it {it}'
            inflight.append((s,p_it)); stage_fill[s]=None; p_it+=1
        elif a=='L':
            s,it=inflight.pop(0)  # cp.async completion in order per thread (arrive.noinc waits for all prior)
            stage_fill[s]=it; full[s].arrive()
        elif a[0]=='C':
            w=a[1]; c=cons[w]; it=c['it']; s=it%STAGES
            if stage_fill[s]!=it: return f'RAW: warp {w} reads stage {s} for {it}, holds {stage_fill[s]}'
            # promotion every 4: wait<0>
            if it>0 and it%4==0:
                while c['groups']: g=c['groups'].pop(0); reading[g[0]].discard((w,g[1]))
            if skip and rnd.random()<0.3:  # tile 6: no wgmma, drain earlier groups
                while c['groups']: g=c['groups'].pop(0); reading[g[0]].discard((w,g[1]))
            else:
                c['groups'].append((s,it)); reading.setdefault(s,set()).add((w,it))
            # wgmma_wait<1>: all but newest complete
            while len(c['groups'])>1: g=c['groups'].pop(0); reading[g[0]].discard((w,g[1]))
            if it>0: empty[(it-1)%STAGES].arrive()
            c['it']+=1
        elif a[0]=='F':  # final wgmma_wait<0>
            w=a[1]; c=cons[w]
            while c['groups']: g=c['groups'].pop(0); reading[g[0]].discard((w,g[1]))
    return 'ok'
bad=0
for STAGES in (3,4,5,6):
    for iters in (0,1,2,3,4,5,7,8,9,13,31,64):
        for seed in range(30):
            r=run(iters,STAGES,seed,skip=seed%2==1)
            if r!='ok':
                bad+=1
                if bad<=5: print(STAGES,iters,seed,r)
print('failures',bad)
sys.exit(1 if bad else 0)
