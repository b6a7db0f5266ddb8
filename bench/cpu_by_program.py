"""Where a command's CPU goes, by program: `python bench/cpu_by_program.py [--every S] -- COMMAND [ARGS...]`.

Runs COMMAND and samples every process on the machine from /proc every S seconds (3 by default) while it runs,
then prints the CPU seconds of each program (kube-apiserver, etcd, a `python -m` module, the pytest workers, ...),
its share, how many processes of it were seen, and the CPU the machine had over the run. A process alive at the
start counts only what it uses after; one that starts and ends between two samples is missed (its parent's
children time holds it, printed apart), so a short interval sees more of the short-lived helpers. Linux only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def program(argv: list[str]) -> str:
    """A process's program, from its command line: a Python process by the module or script it runs."""
    first = argv[0]
    if "pytest-xdist" in first or "::" in first:  # a worker's title (setproctitle)
        return "pytest worker"
    name = Path(first).name
    if not name.startswith("python"):
        return name
    rest = argv[1:]
    if rest[:2] == ["-u", "-c"]:  # execnet's bootstrap: a pytest-xdist worker
        return "pytest worker"
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option == "-m" and rest:
            return f"python -m {rest[0]}"
        if option == "-c":
            return "python -c"
        if option in ("-W", "-X") and rest:
            rest.pop(0)  # the option's value
    return f"python {Path(rest[0]).name}" if rest else "python"


def sample() -> dict[tuple[str, str], tuple[list[str], int, int]]:
    """Every process now: (pid, start time) -> (command line, own CPU ticks, reaped children's CPU ticks)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            argv = [a for a in Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0") if a]
        except OSError:
            continue
        if argv:
            own, children = int(stat[11]) + int(stat[12]), int(stat[13]) + int(stat[14])
            found[(entry, stat[19])] = (argv, own, children)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=float, default=3.0, help="seconds between samples")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if not command:
        parser.error("give the command to run after --")
    seen = sample()
    cpu: Counter[str] = Counter()
    children: Counter[str] = Counter()
    processes: Counter[str] = Counter()
    started = time.monotonic()
    run = subprocess.Popen(command)
    while True:
        done = run.poll() is not None
        for key, (argv, own, reaped) in sample().items():
            name = program(argv)
            before = seen.get(key)
            if before is None:
                processes[name] += 1
            cpu[name] += own - (before[1] if before else 0)
            children[name] += reaped - (before[2] if before else 0)
            seen[key] = (argv, own, reaped)
        if done:
            break
        time.sleep(options.every)
    wall = time.monotonic() - started
    total = sum(cpu.values())
    available = wall * (os.cpu_count() or 1)
    share = 100 * total / TICKS / available
    print(f"{command[0]} exited {run.returncode} after {wall:.0f} s; sampled CPU {total / TICKS:.0f} s", end=" ")
    print(f"of the {available:.0f} s the machine's {os.cpu_count()} cores had ({share:.0f}%)")
    print(f"{'CPU s':>8} {'share':>6} {'seen':>5}  program")
    for name, ticks in cpu.most_common():
        if ticks > 0:
            print(f"{ticks / TICKS:8.1f} {100 * ticks / total:5.1f}% {processes[name]:5d}  {name}")
    print("reaped children's CPU (short-lived helpers, and the sampled ones again), by parent:")
    for name, ticks in children.most_common(8):
        if ticks > 0:
            print(f"{ticks / TICKS:8.1f}  {name}")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
