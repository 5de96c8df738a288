"""display(): each repr method IPython honours, bundles, metadata, the
display ledger, and the invalid-output hint, through a real child on fd 3."""

import base64
import json
import unittest

from test_bootstrap import run_with_displays

from pycage import _wire

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
JPEG = b"\xff\xd8\xff\xe0" + bytes(range(20))

CLASSES = f"""
PNG = {PNG!r}
JPEG = {JPEG!r}

class Html:
    def _repr_html_(self): return "<b>hi</b>"
    def __repr__(self): return "Html()"

class Markdown:
    def _repr_markdown_(self): return "# hi"

class Svg:
    def _repr_svg_(self): return "<svg/>"

class Png:
    def _repr_png_(self): return PNG

class Jpeg:
    def _repr_jpeg_(self): return JPEG

class Json:
    def _repr_json_(self): return {{"a": [1, 2.5, None]}}

class Latex:
    def _repr_latex_(self): return "$x^2$"

class WithMetadata:
    def _repr_png_(self): return PNG, {{"width": 3, "height": 2}}

class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {{"text/html": "<i>bundle</i>", "application/x-thing": b"\\x00\\x01"}}
    def _repr_html_(self): raise AssertionError("the bundle gave text/html already")
    def _repr_markdown_(self): return "md too"

class BundleWithMetadata:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {{"text/plain": "plain"}}, {{"text/plain": {{"k": 1}}}}

class Nothing:
    def _repr_html_(self): return None
    def _repr_png_(self): return 42  # not bytes: left out, as IPython does

class SelfDisplaying:
    def _ipython_display_(self):
        display({{"text/plain": "from _ipython_display_"}}, raw=True)

class Broken:
    def _repr_html_(self): raise ValueError("no html today")
"""


def displays_of(program, **boot):
    done, _, _, _, displays = run_with_displays(CLASSES + program, **boot)
    return done, displays


def data(frame):
    return frame["data"]


class DisplayTest(unittest.TestCase):
    def test_each_repr_method(self):
        done, displays = displays_of(
            "for cls in (Html, Markdown, Svg, Png, Jpeg, Json, Latex):\n"
            "    r = display(cls())\n"
            "    assert r is None\n"
            "return 'ok'"
        )
        self.assertEqual(done, {"type": "done", "value": "ok"})
        got = [data(d) for d in displays]
        self.assertEqual(got[0], {"text/html": "<b>hi</b>", "text/plain": "Html()"})
        self.assertEqual(got[1]["text/markdown"], "# hi")
        self.assertEqual(got[2]["image/svg+xml"], "<svg/>")
        self.assertEqual(base64.b64decode(got[3]["image/png"]), PNG)
        self.assertEqual(base64.b64decode(got[4]["image/jpeg"]), JPEG)
        self.assertEqual(json.loads(got[5]["application/json"]), {"a": [1, 2.5, None]})
        self.assertEqual(got[6]["text/latex"], "$x^2$")
        # text/plain is always there, from repr, and comes last (IPython's order).
        for bundle in got:
            self.assertEqual(list(bundle)[-1], "text/plain")
            self.assertTrue(bundle["text/plain"].startswith("<__main__.") or bundle["text/plain"] == "Html()")
        self.assertTrue(all("metadata" not in d for d in displays))

    def test_plain_objects_and_several_at_once(self):
        _, displays = displays_of("display(1, 'two', [3])")
        self.assertEqual(
            [data(d) for d in displays], [{"text/plain": "1"}, {"text/plain": "'two'"}, {"text/plain": "[3]"}]
        )

    def test_mimebundle_first_then_the_methods_for_what_it_lacks(self):
        _, displays = displays_of("display(Bundle())\ndisplay(BundleWithMetadata())")
        bundle = data(displays[0])
        self.assertEqual(bundle["text/html"], "<i>bundle</i>")
        self.assertEqual(bundle["text/markdown"], "md too")
        self.assertEqual(base64.b64decode(bundle["application/x-thing"]), b"\x00\x01")
        self.assertIn("text/plain", bundle)
        self.assertEqual(
            displays[1], {"type": "display", "data": {"text/plain": "plain"}, "metadata": {"text/plain": {"k": 1}}}
        )

    def test_metadata_from_a_method_and_from_the_call(self):
        _, displays = displays_of("display(WithMetadata(), metadata={'extra': True})")
        self.assertEqual(displays[0]["metadata"], {"image/png": {"width": 3, "height": 2}, "extra": True})
        # Metadata that is not JSON is left out; the display stays.
        _, displays = displays_of("display(1, metadata={'x': {1, 2}})")
        self.assertEqual(displays, [{"type": "display", "data": {"text/plain": "1"}}])

    def test_include_exclude_raw_and_ipython_display(self):
        _, displays = displays_of(
            "display(Html(), include=['text/html'])\n"
            "display(Html(), exclude=['text/html'])\n"
            "display({'text/markdown': '**raw**', 'image/png': PNG}, raw=True)\n"
            "display(SelfDisplaying())\n"
            "display(Nothing())\n"
        )
        got = [data(d) for d in displays]
        self.assertEqual(got[0], {"text/html": "<b>hi</b>"})
        self.assertEqual(got[1], {"text/plain": "Html()"})
        self.assertEqual(got[2]["text/markdown"], "**raw**")
        self.assertEqual(base64.b64decode(got[2]["image/png"]), PNG)
        self.assertEqual(got[3], {"text/plain": "from _ipython_display_"})
        self.assertEqual(list(got[4]), ["text/plain"])

    def test_a_failing_repr_method_raises_in_the_program(self):
        done, displays = displays_of("display(Broken())")
        self.assertEqual(done["error"]["kind"], "exception")
        self.assertIn("ValueError: no html today", done["error"]["message"])
        self.assertEqual(displays, [])

    def test_display_is_a_builtin_library_code_sees(self):
        done, displays = displays_of(
            "import builtins\n"
            "assert builtins.display is display\n"
            "def f(): exec('display(7)', {})\n"
            "f()\n"
            "display = None  # the program's own global; the builtin comes back next run\n"
            "builtins.display(8)\n"
        )
        self.assertNotIn("error", done)
        self.assertEqual([data(d) for d in displays], [{"text/plain": "7"}, {"text/plain": "8"}])

    def test_the_ledger_stops_at_the_first_display_that_does_not_fit(self):
        # {"type":"display","data":{"text/plain":"'aaaa'"}} is 49 bytes.
        program = "for i in range(4):\n    display('a' * 4)\nprint('still running')\nreturn 5"
        done, logs, _, _, displays = run_with_displays(program, max_display=2 * 49 + 10)
        self.assertEqual(done["value"], 5)
        self.assertEqual("".join(log["text"] for log in logs), "still running\n")
        self.assertEqual(len(displays), 3)
        self.assertEqual(
            displays[2],
            {"type": "display", "data": {"text/plain": _wire.display_truncation_marker(108)}, "truncated": True},
        )
        done, _, _, _, displays = run_with_displays("display(1)", max_display=0)
        self.assertEqual([d.get("truncated") for d in displays], [True])

    def test_returning_a_rich_object_says_display_it(self):
        done, _ = displays_of("class DataFrame: pass\nreturn DataFrame()")
        self.assertEqual(done["error"]["kind"], "invalid-output")
        self.assertIn("is a DataFrame, which is not JSON; to show it, display() it", done["error"]["message"])
        done, _ = displays_of("return {1, 2}")
        self.assertNotIn("display()", done["error"]["message"])


if __name__ == "__main__":
    unittest.main()
