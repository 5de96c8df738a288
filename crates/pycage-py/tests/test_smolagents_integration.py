"""pycage.smolagents: PycageExecutor as a CodeAgent's executor, driven by a
scripted smolagents Model (no network model), against real children."""

from __future__ import annotations

import sys

import pytest
from integration_programs import png_program

import pycage
from conftest import unavailable

try:
    import smolagents
    from smolagents import CodeAgent, Model, tool
    from smolagents.local_python_executor import InterpreterError
    from smolagents.memory import ActionStep
    from smolagents.models import ChatMessage, MessageRole

    from pycage.smolagents import PycageExecutor
except ImportError:  # pragma: no cover - the CI venv installs the pinned version
    smolagents = None


@pytest.fixture(autouse=True)
def _needs_smolagents():
    if smolagents is None:
        unavailable("smolagents is not installed (the CI venv installs the pinned version)")


def scripted(replies):
    """A smolagents Model whose replies are ``replies``, in order; it keeps
    the messages of every call."""

    class Scripted(Model):
        def __init__(self):
            super().__init__(model_id="scripted")
            self.replies = list(replies)
            self.inputs = []

        def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kw):
            self.inputs.append(messages)
            return ChatMessage(role=MessageRole.ASSISTANT, content=self.replies.pop(0))

    return Scripted()


def text_of(messages):
    out = []
    for m in messages:
        content = m.content if hasattr(m, "content") else m["content"]
        if isinstance(content, str):
            out.append(content)
        else:
            out += [part.get("text", "") for part in content or [] if isinstance(part, dict)]
    return "\n".join(out)


def action_steps(agent):
    return [s for s in agent.memory.steps if isinstance(s, ActionStep)]


def test_code_agent_runs_steps_in_one_session_with_host_tools(rt):
    booked = []  # host state the tool closes over: it never enters the sandbox

    @tool
    def book(city: str, nights: int = 1) -> str:
        """Book a hotel.

        Args:
            city: where
            nights: how many nights
        """
        booked.append((city, nights))
        return f"booking-{len(booked)}"

    model = scripted(
        [
            "Thought: book two.\n<code>\n"
            "first = book('Paris')\n"
            "second = book(city='Oslo', nights=3)\n"
            "print('booked', first, second)\n"
            "[first, second]\n</code>",
            "Thought: this fails.\n<code>\nprint('about to fail')\nraise ValueError('no rooms left')\n</code>",
            "Thought: done.\n<code>\nfinal_answer({'ids': [first, second], 'budget': budget})\n</code>",
        ]
    )
    executor = PycageExecutor(rt)
    agent = CodeAgent(tools=[book], model=model, executor=executor, max_steps=5, verbosity_level=-1)
    try:
        answer = agent.run("Book Paris and Oslo.", additional_args={"budget": 2**70})
    finally:
        executor.cleanup()

    assert answer == {"ids": ["booking-1", "booking-2"], "budget": 2**70}
    assert booked == [("Paris", 1), ("Oslo", 3)]
    steps = action_steps(agent)
    assert len(steps) == 3
    assert steps[0].observations == (
        "Execution logs:\nbooked booking-1 booking-2\nLast output from code snippet:\n['booking-1', 'booking-2']"
    )
    assert steps[0].action_output == ["booking-1", "booking-2"]
    assert steps[1].error is not None
    assert "about to fail" in str(steps[1].error) and "ValueError: no rooms left" in str(steps[1].error)
    assert 'File "<program>", line 2, in <module>' in str(steps[1].error)
    # The model saw the failure before writing step 3.
    seen = text_of(model.inputs[2])
    assert "ValueError: no rooms left" in seen and "about to fail" in seen
    assert steps[2].is_final_answer


def test_tool_calls_positional_keyword_failures_and_outputs(process_rt):
    @tool
    def divide(a: float, b: float) -> float:
        """Divide.

        Args:
            a: dividend
            b: divisor
        """
        return a / b

    executor = PycageExecutor(process_rt)
    try:
        executor.send_tools({"divide": divide})
        executor.send_variables({"n": 10})
        out = executor("divide(n, 4), divide(a=1, b=8), divide({'a': 9, 'b': 3})")
        assert (out.output, out.is_final_answer, out.logs) == ([2.5, 0.125, 3.0], False, "")
        out = executor("try:\n    divide(1, 0)\nexcept ToolError as e:\n    caught = [e.tool, str(e)]\ncaught\n")
        assert out.output == ["divide", "ZeroDivisionError: division by zero"]
        with pytest.raises(InterpreterError) as e:
            executor("divide({1, 2}, 1)")
        assert "TypeError: argument of divide() is not JSON" in str(e.value)
        # A final expression that is not JSON comes back as its str(), as smolagents shows it.
        assert executor("import datetime\ndatetime.date(2024, 5, 1)").output == "2024-05-01"
        assert executor("print('no value')").output is None
        # The final expression is found where the tokenizer sees it: after a
        # line break inside a literal that str.splitlines would also split at,
        # with non-ASCII before it on its line, and a comment after it.
        assert executor("s = 'é\u2028\x0cé'\nt = 'ü'; len(s) + len(t)  # comment").output == 5
        with pytest.raises(InterpreterError, match="SyntaxError"):
            executor("def broken(:\n")
        # Names persist: the session survived the failures.
        assert executor("caught[0], n").output == ["divide", 10]
    finally:
        executor.cleanup()


def test_final_answer_ends_the_step_even_under_except_exception(process_rt):
    executor = PycageExecutor(process_rt)
    agent = CodeAgent(
        tools=[],
        model=scripted(
            [
                "<code>\ntry:\n    final_answer(42)\nexcept Exception:\n    print('swallowed')\n"
                "print('not reached')\n</code>"
            ]
        ),
        executor=executor,
        verbosity_level=-1,
    )
    try:
        assert agent.run("answer") == 42
        (step,) = action_steps(agent)
        assert step.is_final_answer
        assert "not reached" not in (step.observations or "") and "swallowed" not in (step.observations or "")
    finally:
        executor.cleanup()


def test_a_step_past_its_budget_ends_the_session_and_the_next_starts_afresh():
    # Its own runtime: the step that overstays takes its session down.
    with pycage.Runtime(isolation="process", python=sys.executable, wall_seconds=0.5) as runtime:
        executor = PycageExecutor(runtime)
        executor.send_tools({})
        executor.send_variables({"kept": "from the agent"})
        executor("defined = 1")
        executor.send_tools({})  # the same (no) tools again: the same session
        assert executor("defined").output == 1
        with pytest.raises(InterpreterError) as e:
            executor("while True:\n    pass\n")
        assert "(timeout)" in str(e.value) and "the next step starts a new one" in str(e.value)
        out = executor("[kept, 'defined' in globals()]")
        assert out.output == ["from the agent", False]
        executor.cleanup()


def test_new_tools_start_a_new_session_and_variables_must_be_json(process_rt):
    executor = PycageExecutor(process_rt)
    try:
        executor.send_tools({"one": lambda: 1})
        executor("x = one()")
        assert executor("x").output == 1
        executor.send_tools({"two": lambda: 2})
        assert executor("[two(), 'x' in globals(), 'one' in globals()]").output == [2, False, False]
        with pytest.raises(TypeError, match="the agent variable 'when' \\(set\\) cannot be sent"):
            executor.send_variables({"when": {1}})
        with pytest.raises(ValueError, match="must be an identifier"):
            executor.send_tools({"not a name": lambda: 1})
    finally:
        executor.cleanup()


def test_shown_images_become_the_output_and_the_models_observation_images(process_rt):
    executor = PycageExecutor(process_rt)
    model = scripted(["<code>\n" + png_program(3, 2) + "</code>", "<code>\nfinal_answer('seen')\n</code>"])
    agent = CodeAgent(
        tools=[], model=model, executor=executor, step_callbacks=[executor.attach_images], verbosity_level=-1
    )
    try:
        assert agent.run("draw") == "seen"
    finally:
        executor.cleanup()
    first = action_steps(agent)[0]
    assert first.action_output.size == (3, 2)
    assert [im.size for im in first.observations_images] == [(3, 2)]
    # smolagents sends the image to the model with the next request.
    assert any(
        isinstance(part, dict) and part.get("type") == "image"
        for m in model.inputs[1]
        for part in (m.content if isinstance(m.content, list) else [])
    )
