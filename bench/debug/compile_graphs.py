"""Which voxconv calls end up inside torch.compile graphs (issue 20).

Compiles tests/python/test_torch_integration.py's Net (and, with --a,
workload A's Sequential network) with a backend that prints every graph
dynamo hands it, then lists graph breaks and recompiles. voxconv ops are
meant to run outside the graphs (_ops.outside_compile): a graph that
contains torch.ops.voxconv.* means the map it names is not kept alive by
anything but the graph's constants.

    python3 bench/debug/compile_graphs.py [--a]
"""
import os, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python"))
import voxconv  # noqa: E402
import ref  # noqa: E402
from test_torch_integration import Net  # noqa: E402

graphs = []


def show(gm, example_inputs):
    code = gm.code
    graphs.append(code)
    has = "voxconv" in code
    print(f"--- graph {len(graphs)} ({len(gm.graph.nodes)} nodes){' CONTAINS voxconv' if has else ''}")
    print(code if has or os.environ.get("SHOW_ALL") else code[:600])
    return gm.forward


def main():
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch._dynamo.reset()
    coords = ref.rand_coords(500, 10).to(dev)
    x = voxconv.SparseTensor(torch.randn(len(coords), 4, device=dev), coords)
    net = Net().to(dev)
    exp = torch._dynamo.explain(net)(x)
    print(f"explain: graphs {exp.graph_count}, breaks {exp.graph_break_count}")
    for b in exp.break_reasons[:20]:
        print("  break:", str(b.reason)[:200], "|", (b.user_stack[-1] if b.user_stack else ""))
    torch._dynamo.reset()
    compiled = torch.compile(net, backend=show)
    y = compiled(x)
    y.sum().backward()
    print(f"{len(graphs)} graphs; with voxconv ops: {sum('voxconv' in g for g in graphs)}")


if __name__ == "__main__":
    main()
