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
