"""Processes that a job left behind, as the launcher tests look for them."""
import subprocess
import time


def no_process_matches(pattern, within=10.0):
    """Whether no process matches ``pattern`` within ``within`` seconds: a killed rank
    leaves when the kernel has reaped it, which a loaded machine may take a moment for."""
    deadline = time.monotonic() + within
    while True:
        out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
        if out.stdout.strip() == "":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
