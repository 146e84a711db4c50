"""A third-party tracker installed as a distribution is usable by name, like the built-ins."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

PLUGIN = '''
from accel_tracking import GeneralTracker, on_main_process

LOGGED = []


class JsonLinesTracker(GeneralTracker):
    name = "jsonlines"
    requires_logging_directory = True

    def __init__(self, run_name, logging_dir, **kwargs):
        super().__init__()
        self.path = f"{logging_dir}/{run_name}.jsonl"
        self.file = None

    @property
    def tracker(self):
        return self.file

    @on_main_process
    def start(self):
        self.file = open(self.path, "w")

    @on_main_process
    def log(self, values, step=None, **kwargs):
        self.file.write(__import__("json").dumps({"step": step, **values}) + "\\n")

    @on_main_process
    def finish(self):
        self.file.close()
'''

SCRIPT = '''
import sys
from accel_tracking import TRACKERS, TrackerGroup, build_trackers, filter_trackers
from accel_tracking import get_available_trackers

log_dir = sys.argv[1]
names = filter_trackers(["JsonLines"], logging_dir=log_dir)
print("AVAILABLE", "jsonlines" in get_available_trackers())
group = TrackerGroup(build_trackers(names, "demo", log_dir), strict=True)
group.start()
for step in range(3):
    group.log({"loss": 1.0 / (step + 1)}, step=step)
print("CLASS", type(group.get("jsonlines")).__module__)
group.finish()
'''


def make_distribution(site: Path) -> None:
    """A minimal installed distribution: a module plus a dist-info with entry_points.txt."""
    (site / "jsonlines_tracker.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "jsonlines_tracker-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: jsonlines-tracker\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[accel.trackers]\njsonlines = jsonlines_tracker:JsonLinesTracker\n")


def test_entry_point_tracker_is_usable_by_name(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    make_distribution(site)
    code = f"import sys; sys.path.insert(0, {str(site)!r}); " + "exec(sys.stdin.read())"
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], input=SCRIPT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "AVAILABLE True" in proc.stdout and "CLASS jsonlines_tracker" in proc.stdout
    rows = [json.loads(line) for line in (tmp_path / "demo.jsonl").read_text().splitlines()]
    assert rows == [{"step": 0, "loss": 1.0}, {"step": 1, "loss": 0.5},
                    {"step": 2, "loss": 1 / 3}]
