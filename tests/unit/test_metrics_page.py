"""``/metrics`` adds up the node's processes' files (admin/metrics_page.py): a file that a
process has just created, not yet sized, holds nothing and fails no scrape (it made
prometheus_client's own collector raise, and the scrape answer 500, in a CI run)."""

import os
import subprocess
import sys

from xruntime.admin.metrics_page import MetricsPage
from xruntime.settings.config import Settings


def test_a_process_file_not_yet_sized_fails_no_scrape(store, tmp_path, monkeypatch):
    folder = tmp_path / "metrics"
    folder.mkdir()
    # a process that recorded a request: its file, written by prometheus_client itself
    recording = (
        "from prometheus_client import Counter\n"
        "Counter('xruntime_test_calls', 'calls', ['binding']).labels('json').inc(3)\n"
    )
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(folder))
    subprocess.run([sys.executable, "-c", recording], env=env, check=True)
    # another, caught between creating its file and sizing it
    (folder / "counter_999999.db").write_bytes(b"")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    page = MetricsPage(store, "node-a:1", Settings)
    body, _ = page.exposition()
    assert 'xruntime_test_calls_total{binding="json"} 3.0' in body.decode()
