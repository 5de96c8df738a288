"""Trivial runs back to back from 4 threads for a while, through the package:
the load to profile with ``perf`` (see ``perf_by_function.py``).

    perf record -a -g -F 999 -o perf.data -- python benchmarks/closed_loop.py sandbox 15

Prints the runs made, and this process's pid (the host, for
``perf_by_function.py --host``).
"""

import os
import sys
import threading
import time

import pycage


def main():
    isolation, seconds = sys.argv[1], float(sys.argv[2])
    rt = pycage.Runtime(isolation=isolation, zygote_max_runs=1_000_000)
    rt.run("return 1")
    time.sleep(0.5)
    stop = time.monotonic() + seconds
    done = [0]

    def loop():
        while time.monotonic() < stop:
            rt.run("return 1")
            done[0] += 1

    threads = [threading.Thread(target=loop) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"runs {done[0]} host {os.getpid()}")
    rt.close()


if __name__ == "__main__":
    main()
