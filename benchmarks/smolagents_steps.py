"""Step latency of a smolagents CodeAgent: pycage's PycageExecutor beside
smolagents' own LocalPythonExecutor, on the same scripted agent.

The agent's model is scripted (no model time): each step calls a host tool
twice, computes a little and prints; the last step calls final_answer. For
every executor this measures the time the executor takes per step (the
agent's call of ``executor(code)``, timed around it) and the whole step as
the agent runs it (``agent.run`` time over the steps). The first step of a
PycageExecutor also opens its session (and a runtime's first run starts its
zygote), so the first run of each executor is a warm-up, reported apart.

    python benchmarks/smolagents_steps.py [--steps 20] [--rounds 5] [--no-sandbox]

Needs smolagents (crates/pycage-py/tests/requirements-integrations.txt) and
pycage built from this clone (a release build for figures).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from smolagents import CodeAgent, Model, tool
from smolagents.local_python_executor import LocalPythonExecutor
from smolagents.models import ChatMessage, MessageRole

import pycage
from pycage.smolagents import PycageExecutor

STEP = (
    "Thought: look two up.\n<code>\n"
    "a = lookup(key='k{i}')\n"
    "b = lookup('k{j}')\n"
    "total = sum(len(v) for v in (a, b)) + sum(range(100))\n"
    "print(a, b, total)\n"
    "</code>"
)
FINAL = "Thought: done.\n<code>\nfinal_answer(total)\n</code>"


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key
    """
    return f"value-of-{key}"


class Scripted(Model):
    def __init__(self, replies):
        super().__init__(model_id="scripted")
        self.replies = list(replies)

    def generate(self, messages, stop_sequences=None, **kwargs):
        return ChatMessage(role=MessageRole.ASSISTANT, content=self.replies.pop(0))


class Timed:
    """Wraps an executor, recording the seconds of each step's call."""

    def __init__(self, inner):
        self.inner = inner
        self.times: list[float] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def send_tools(self, tools):
        self.inner.send_tools(tools)

    def send_variables(self, variables):
        self.inner.send_variables(variables)

    def __call__(self, code):
        start = time.perf_counter()
        try:
            return self.inner(code)
        finally:
            self.times.append(time.perf_counter() - start)


def one_run(executor, steps: int) -> tuple[list[float], float]:
    """Per-step executor seconds and the agent's seconds per step."""
    replies = [STEP.format(i=i, j=i + 1) for i in range(steps)] + [FINAL]
    timed = Timed(executor)
    agent = CodeAgent(tools=[lookup], model=Scripted(replies), executor=timed, max_steps=steps + 2, verbosity_level=-1)
    start = time.perf_counter()
    answer = agent.run("look things up")
    elapsed = time.perf_counter() - start
    assert isinstance(answer, int), answer
    return timed.times, elapsed / (steps + 1)


def measure(name: str, make, steps: int, rounds: int) -> dict:
    executor = make()
    first, _ = one_run(executor, steps)  # warm-up: a session, a zygote
    per_call: list[float] = []
    per_step: list[float] = []
    for _ in range(rounds):
        times, step = one_run(executor, steps)
        per_call += times
        per_step.append(step)
    if hasattr(executor, "cleanup"):
        executor.cleanup()
    row = {
        "executor": name,
        "first_step_ms": first[0] * 1e3,
        "call_median_ms": statistics.median(per_call) * 1e3,
        "call_p90_ms": statistics.quantiles(per_call, n=10)[-1] * 1e3,
        "agent_step_median_ms": statistics.median(per_step) * 1e3,
    }
    print(
        f"{name:34} first step {row['first_step_ms']:8.2f} ms   executor call median {row['call_median_ms']:6.2f} ms"
        f" (p90 {row['call_p90_ms']:6.2f})   agent step median {row['agent_step_median_ms']:6.2f} ms",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-sandbox", action="store_true", help="skip isolation='sandbox'")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {args.steps} steps + final_answer, {args.rounds} rounds after a warm-up")
    measure("LocalPythonExecutor (smolagents)", lambda: LocalPythonExecutor([]), args.steps, args.rounds)
    with pycage.Runtime(isolation="process", python=sys.executable) as rt:
        measure("PycageExecutor isolation=process", lambda: PycageExecutor(rt), args.steps, args.rounds)
    if not args.no_sandbox:
        with pycage.Runtime(python=sys.executable) as rt:
            measure("PycageExecutor isolation=sandbox", lambda: PycageExecutor(rt), args.steps, args.rounds)


if __name__ == "__main__":
    main()
