import subprocess
import sys


def test_demo_runs_and_reports_the_ledger():
    result = subprocess.run(
        [sys.executable, "-m", "skdpcluster.demo", "--seed", "1"],
        capture_output=True, text=True, timeout=600, check=True,
    )
    assert "Shared accountant" in result.stdout
    assert "refused" in result.stdout
