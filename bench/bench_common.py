"""What the benchmark scripts of bench/ share (they run as scripts, so this
folder is on their import path)."""

import subprocess


def commit_id(repo):
    """The checkout's short commit, "-dirty" when tracked files changed;
    None outside a git checkout (results record which tree they timed)."""
    try:
        rev = subprocess.run(["git", "-C", repo, "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        if rev.returncode:
            return None
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return rev.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def resolve_device(ap, dev):
    """torch.device for a --device value (cuda, cuda:N or cpu), made current
    on CUDA; argparse errors for anything else, for a GPU torch does not see
    and for a library built without CUDA."""
    import torch
    import voxconv  # the calling script has put it on the path
    try:
        device = torch.device(dev)
    except RuntimeError as e:
        ap.error(f"--device {dev}: {e}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            ap.error("--device cuda: torch sees no GPU")
        if not voxconv.has_cuda():
            ap.error(f"--device cuda: {voxconv.library_path} has no CUDA backend")
        device = torch.device("cuda", device.index or 0)
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        ap.error(f"--device {dev}: want cuda, cuda:N or cpu")
    return device


def run_header(script, device, repo):
    """The fields every results JSON of bench/ starts with: what ran, when,
    on which tree, device and software."""
    import datetime
    import os
    import platform
    import torch
    import voxconv
    return {"script": script,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit_id(repo), "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else
            f"CPU ({os.cpu_count()} cores online)",
            "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "python": platform.python_version(), "voxconv": voxconv.library_version(),
            "library_path": voxconv.library_path}
