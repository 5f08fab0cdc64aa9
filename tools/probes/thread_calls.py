"""Which Python threads of a compiled process run Python while it sits idle, and how many calls each wake makes:
the work that sys.monitoring's Python-call count would take for a step's (perfgate.measure.counts).

usage: python tools/probes/thread_calls.py [SECONDS]      (default 80: past inductor's 60 s pool quiesce)

Compiles a small MLP with inductor on the CPU, then prints, second by second, the Python calls made on every
thread but the main one (threading.setprofile: threads that `threading` starts after it is set). 2026-11-28,
CPU box, torch 2.14.1: tqdm's monitor thread ("tqdm_monitor", started by the compile's progress bar) woke every
10 s with 43 calls; nothing else ran.
"""

import collections
import sys
import threading
import time

import torch

calls: collections.Counter = collections.Counter()


def profiled(frame, event, _arg) -> None:
    if event == "call":
        calls[(threading.current_thread().name, frame.f_code.co_name)] += 1


def main(seconds: int) -> None:
    threading.setprofile(profiled)  # before the compile, so the threads it starts are seen
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)))
    start = time.time()
    model(torch.randn(16, 64))
    print(f"compiled in {time.time() - start:.1f} s; threads: {[t.name for t in threading.enumerate()]}")
    calls.clear()
    for second in range(1, seconds + 1):
        time.sleep(1)
        others = {key: n for key, n in calls.items() if key[0] != "MainThread"}
        if others:
            top = sorted(others.items(), key=lambda kv: -kv[1])[:6]
            print(f"t+{second} s: {sum(others.values())} calls on other threads, e.g. {top}")
        calls.clear()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 80)
