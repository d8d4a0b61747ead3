"""launch/device_check.sh refuses to start without its carry folder, in one line, exit 2."""

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_without_a_carry_folder_it_says_so_and_exits_2(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "CARRY": str(tmp_path / "none")}
    done = subprocess.run(["bash", str(REPO / "launch" / "device_check.sh"), "profile"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "MANIFEST.json" in done.stderr and "device_carry.py" in done.stderr
