"""Rich output and files through the Python package: a matplotlib plot
comes back as a Display (image/png at the figure's size, renderable by
Jupyter through ``_repr_mimebundle_``), ``on_display`` streams displays,
and ``inputs=`` / ``output_dir=`` / ``Result.files`` carry files in and
out, in both isolations.

The plots run in the data-science venv ``.ci/data-venv.sh`` installs
(``$PYCAGE_DATA_VENV``, default ``<repo>/target/data-venv``); without it
those tests skip, and fail under PYCAGE_REQUIRE_ALL_TESTS=1.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

import pycage
from conftest import unavailable

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

PLOT = """\
import matplotlib.pyplot as plt
plt.figure(figsize=(6.4, 4.8), dpi=100)
plt.plot([0, 1, 2, 3], [1, 4, 2, 5])
plt.show()
display({"rows": 2})
plt.figure(figsize=(3, 2), dpi=100)
plt.plot([3, 1])
return "plotted"
"""


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:16] == b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", png[:16]
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


@pytest.fixture(scope="module")
def data_venv():
    venv = os.path.realpath(os.environ.get("PYCAGE_DATA_VENV") or os.path.join(REPO, "target", "data-venv"))
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        unavailable(f"the data-science venv is not installed in {venv} (run .ci/data-venv.sh)")
    return venv


@pytest.fixture(scope="module", params=["process", "sandbox"])
def plot_rt(request, data_venv):
    try:
        rt = pycage.Runtime(
            isolation=request.param, python=os.path.join(data_venv, "bin", "python"), allow_read=[data_venv]
        )
    except pycage.SandboxUnavailableError as e:
        unavailable(f"sandbox isolation is unavailable here: {e}")
    yield rt
    rt.close()


def check_plot(result: pycage.Result) -> None:
    assert result.value == "plotted", result
    first, middle, last = result.displays
    assert first.mime_types == ["image/png", "text/plain"]
    assert png_size(first.bytes("image/png")) == (640, 480)
    assert first.metadata == {"image/png": {"width": 640, "height": 480}}
    assert first.text.startswith("<Figure size 640x480")
    assert middle == pycage.Display({"text/plain": "{'rows': 2}"}, {})
    assert png_size(last.bytes()) == (300, 200)
    # What Jupyter calls to render it: base64 PNG text, and the metadata.
    data, metadata = first._repr_mimebundle_()
    assert data["image/png"] == first.data["image/png"]
    assert metadata == {"image/png": {"width": 640, "height": 480}}
    assert first._repr_mimebundle_(include=["text/plain"])[0] == {"text/plain": first.text}


def test_a_plot_comes_back_as_png(plot_rt):
    streamed = []
    result = plot_rt.run(PLOT, on_display=streamed.append)
    check_plot(result)
    assert streamed == result.displays


def test_a_plot_through_arun_and_a_session(plot_rt):
    streamed = []

    async def main():
        return await plot_rt.arun(PLOT, on_display=streamed.append)

    result = asyncio.run(main())
    check_plot(result)
    assert streamed == result.displays
    with plot_rt.session() as s:
        s.run("import matplotlib.pyplot as plt\n_ = plt.plot([1, 2])")  # shown when the cell ends
        cell = s.run("x = 1")
        assert cell.displays == []
        shown = s.run(
            "plt.figure(figsize=(2, 1), dpi=100)\n_ = plt.plot([2, 1])\nplt.show()", on_display=streamed.append
        )
        assert [png_size(d.bytes()) for d in shown.displays] == [(200, 100)]


def test_display_kinds_and_json_for_jupyter(rt):
    program = """\
class Table:
    def _repr_html_(self): return "<table><tr><td>1</td></tr></table>"
    def _repr_json_(self): return {"n": [1, 2.5, None]}
    def __repr__(self): return "Table()"
display(Table())
display("plain")
"""
    result = rt.run(program)
    assert result.ok, result.error
    table, plain = result.displays
    assert table.data["text/html"].startswith("<table>")
    assert json.loads(table.data["application/json"]) == {"n": [1, 2.5, None]}
    # Jupyter gets JSON types as objects.
    assert table._repr_mimebundle_()[0]["application/json"] == {"n": [1, 2.5, None]}
    assert table.text == "Table()"
    assert plain.bytes("text/plain") == b"'plain'"
    assert repr(plain) == "<pycage.Display text/plain: \"'plain'\">"


def test_the_value_stays_json_and_says_to_display(rt):
    result = rt.run("class DataFrame:\n    pass\nreturn DataFrame()")
    assert result.error.kind == "invalid-output"
    assert "to show it, display() it" in result.error.message


def test_the_display_budget(rt):
    # 1,045 bytes a frame: the child's ledger stops the third; the host
    # charges 256 bytes more a display and keeps two.
    small = pycage.Runtime(isolation=rt.config["isolation"], max_display_bytes=3000)
    try:
        result = small.run("for i in range(3):\n    display('x' * 1000)\nreturn 'on'")
    finally:
        small.close()
    assert result.value == "on"
    assert [d.text for d in result.displays][2] == "[pycage] display output truncated at 3000 bytes"
    assert len(result.displays) == 3
    # Capped at the line cap: a display that fits is never a line over it.
    capped = pycage.Runtime(isolation="process", max_line_bytes=1024)
    try:
        result = capped.run("display('x' * 2000)\nreturn 1")
    finally:
        capped.close()
    assert [d.text for d in result.displays] == ["[pycage] display output truncated at 1024 bytes"]
    assert result.value == 1


def test_inputs_and_output_dir(rt, tmp_path):
    data = tmp_path / "data.csv"
    data.write_text("1,2,3")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.txt").write_text("A")
    out = tmp_path / "results"
    program = """\
import os
total = sum(int(x) for x in open('data.csv').read().split(','))
os.mkdir('out/sub')
open('out/sum.txt', 'w').write(str(total))
open('out/sub/a.txt', 'w').write(open('folder/a.txt').read() * 3)
os.symlink('/etc/passwd', 'out/link')
try:
    open('data.csv', 'w')
    writable = True
except OSError:
    writable = False
return [total, writable]
"""
    result = rt.run(program, inputs=[data, str(folder)], output_dir=out)
    # Read-only by mode under process isolation, which root may override.
    root_in_process = rt.config["isolation"] == "process" and os.geteuid() == 0
    assert result.value == [6, root_in_process], result
    assert sorted(result.files, key=lambda f: f.path) == [
        pycage.OutputFile("sub/a.txt", 3),
        pycage.OutputFile("sum.txt", 1),
    ]
    assert [(s.path, s.kind) for s in result.skipped_files] == [("link", "excluded")]
    assert (out / "sum.txt").read_text() == "6"
    assert (out / "sub" / "a.txt").read_text() == "AAA"
    # Without output_dir, nothing is copied and nothing is listed (out/ may
    # not even exist then).
    quiet = rt.run("import os\nos.makedirs('out', exist_ok=True)\nopen('out/x', 'w').write('y')")
    assert quiet.ok, quiet.error
    assert quiet.files == [] and quiet.skipped_files == []


def test_output_dir_is_bounded(tmp_path):
    small = pycage.Runtime(isolation="process", max_output_bytes=1000)
    try:
        result = small.run(
            "open('out/a.txt', 'w').write('a' * 600)\nopen('out/b.txt', 'w').write('b' * 600)\nreturn 1",
            output_dir=tmp_path / "o",
        )
    finally:
        small.close()
    assert result.value == 1, result
    # One file fits; the other is skipped whole and named, never cut.
    assert len(result.files) == 1 and result.files[0].bytes == 600
    (skipped,) = result.skipped_files
    assert skipped.kind == "limit" and skipped.path != result.files[0].path
    assert sorted(os.listdir(tmp_path / "o")) == [result.files[0].path]


def test_an_on_display_error_aborts_the_run(process_rt):
    class Stop(Exception):
        pass

    def on_display(d):
        raise Stop(d.text)

    with pytest.raises(Stop, match="'first'"):
        process_rt.run("display('first')\nimport time\ntime.sleep(30)", on_display=on_display)


def test_json_that_is_not_json_stays_text(rt):
    # A program may claim any content is JSON; Jupyter then gets the text.
    program = "display({'application/json': '{not json', 'text/plain': 'x'}, raw=True)"
    result = rt.run(program)
    assert result.ok, result.error
    (shown,) = result.displays
    assert shown._repr_mimebundle_()[0] == {"application/json": "{not json", "text/plain": "x"}


def test_inputs_and_output_dir_through_arun(rt, tmp_path):
    data = tmp_path / "n.txt"
    data.write_text("41")
    out = tmp_path / "o"

    async def main():
        return await rt.arun(
            "v = int(open('n.txt').read()) + 1\nopen('out/v.txt', 'w').write(str(v))\nreturn v",
            inputs=[data],
            output_dir=out,
        )

    result = asyncio.run(main())
    assert result.value == 42
    assert result.files == [pycage.OutputFile("v.txt", 2)]
    assert (out / "v.txt").read_text() == "42"


def test_file_arguments_are_checked(process_rt, tmp_path):
    with pytest.raises(TypeError, match="inputs must be a list of paths"):
        process_rt.run("1", inputs="data.csv")
    with pytest.raises(TypeError, match=r"inputs items must be paths .*got int 1"):
        process_rt.run("1", inputs=[1])
    with pytest.raises(TypeError, match="output_dir must be a path"):
        process_rt.run("1", output_dir=3)
    with pytest.raises(pycage.PycageError, match="invalid input"):
        process_rt.run("1", inputs=[tmp_path / "missing"])
