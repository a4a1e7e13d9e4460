"""A mail's HTML is cleaned in time linear in its size, whatever its shape: each shape here
cost the cleaner time quadratic in its size (seconds to minutes for a mail under 1 MB), and
each is bounded by CPU seconds a correct run is many times below."""
import time

import pytest

from inbox.mail_html import UNSIZED_IMAGE, frame_hint, shown_html
from mailboxes.markup import MAX_ATTRIBUTES

# A correct run takes a fraction of a second of this process's CPU, also on a loaded machine.
CPU_SECONDS = 3.0
COUNT = 30_000


def cleaned(html: str) -> str:
    started = time.process_time()
    shown = shown_html(html, parts_url="https://relay.example/parts/")
    spent = time.process_time() - started
    assert spent < CPU_SECONDS, f"cleaning {len(html)} characters took {spent:.1f} s of CPU"
    return shown


@pytest.mark.parametrize("tag", ["form", "blink", "marquee", "object", "iframe"])
def test_many_sibling_elements_that_are_unwrapped_keep_their_text_in_order(tag):
    shown = cleaned("<body>" + "".join(f"<{tag}>t{index}.</{tag}>" for index in range(COUNT)))
    assert f"<{tag}" not in shown
    assert "".join(f"t{index}." for index in range(COUNT)) in shown


def test_forms_nested_deep_are_unwrapped_around_their_text():
    shown = cleaned("<body>" + "<form>a<b>b</b>" * COUNT + "end")
    assert "<form" not in shown and "end" in shown


@pytest.mark.parametrize("killed", ["<input>", "<!---->", "<script></script>", "<button>x</button>", "<meta>"])
def test_many_sibling_elements_that_are_dropped_leave_the_text_between_them(killed):
    # Twice as many: what grew quadratically here is the text, in shorter pieces.
    shown = cleaned("<body>" + "".join(f"{killed}t{index}." for index in range(2 * COUNT)))
    assert "".join(f"t{index}." for index in range(2 * COUNT)) in shown
    assert killed not in shown


def test_an_element_of_tens_of_thousands_of_attributes_ends_the_html_shown():
    attributes = " ".join(f"a{index}=1" for index in range(40_000))
    shown = cleaned(f"<p>before</p><p {attributes}>inside</p><p>after</p>")
    assert "before" in shown and "a39999" not in shown and "inside" not in shown


def test_an_element_at_the_bound_is_shown_whole():
    attributes = " ".join(f"a{index}=1" for index in range(MAX_ATTRIBUTES))
    shown = cleaned(f"<p {attributes}>inside</p><p>after</p>")
    assert f'a{MAX_ATTRIBUTES - 1}="1"' in shown and "after" in shown


def test_the_frames_size_hint_reads_a_height_of_other_digits_as_unsized_and_stops_at_the_cut():
    assert frame_hint('<img height="²"><img height="30px">')["images"] == UNSIZED_IMAGE + 30
    attributes = " ".join(f"a{index}=1" for index in range(40_000))
    started = time.process_time()
    hint = frame_hint(f"<p>before</p><p {attributes}>inside</p>")
    assert time.process_time() - started < CPU_SECONDS
    assert hint["chars"] == len("before")
