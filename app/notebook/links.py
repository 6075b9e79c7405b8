"""A lab's link ("Copy link") read as show()'s keywords: the text and the view it holds, as the page reads it
(static/js/state.js): a short view in the query (?text=…&layer=…), a long one deflated into the fragment
(#z=…, JSON pairs, deflate-raw, base64url), the model in the query either way. The keywords are then checked as
any others are (app.notebook.widget)."""

import base64
import binascii
import json
import zlib
from urllib.parse import parse_qsl, urlsplit

COMPRESSED = "z="
# The most a view inflates to: the page refuses a link's view past two texts of its most characters (6 bytes a
# character as JSON) and its other fields; this is the page's bound at the lab's default 40,000 characters.
MOST_VIEW_BYTES = 2 * 6 * 40_000 + 4096
PANELS = ("dissection", "grid")  # the widget's; a link's other panel (an experiment) is left closed


class LinkError(ValueError):
    """The link is not one the lab makes."""


def address_of(link: str) -> str:
    """The lab a link opens: its scheme, host and port."""
    parts = urlsplit(link)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise LinkError(f"{link!r} is not a lab's link (http://host:port/?text=…)")
    return f"{parts.scheme}://{parts.netloc}"


def view_of(link: str) -> dict:
    """show()'s keywords for the view a link holds (model, text, pair, mask, pooling, prompt, patch, block, head,
    heads, block_mean, token, also, measure, sinks, segments, scale, panel); what it does not name is left out,
    and so is what the widget does not show (a tour, a lesson, presentation mode, a class)."""
    parts = urlsplit(link)
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    if parts.fragment.startswith(COMPRESSED):
        params = {**{k: v for k, v in params.items() if k == "model"}, **dict(inflated(parts.fragment[2:]))}
    view: dict = {}
    for name in ("model", "text", "pair", "mask", "pooling", "measure", "sinks", "segments", "scale"):
        if name in params:
            view[name] = params[name]
    if params.get("panel") in PANELS:
        view["panel"] = params["panel"]
    if params.get("patch"):
        try:
            view["patch"] = json.loads(params["patch"])  # a patched run: the lab checks it as any analyze's
        except ValueError:
            raise LinkError("the link's patch is damaged (cut short in copying?)") from None
    if "prompt" in params:
        view["prompt"] = params["prompt"]
    if "layer" in params:
        view["block"] = whole(params["layer"])
    if "head" in params:
        view["head"] = "mean" if params["head"] == "mean" else whole(params["head"])
    if params.get("heads"):
        view["heads"] = [whole(part) for part in params["heads"].split(",")]
    if "token" in params:
        view["token"] = whole(params["token"])
    if params.get("with"):
        view["also"] = [whole(part) for part in params["with"].split(",")]
    if params.get("blocks") == "mean":
        view["block_mean"] = True
    return view


def whole(text: str) -> int:
    if not text.isdigit():
        raise LinkError(f"the link names {text!r} where the lab writes a whole number")
    return int(text)


def inflated(encoded: str) -> list[tuple[str, str]]:
    """A compressed view's pairs, inflated no further than MOST_VIEW_BYTES."""
    try:
        compressed = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        text = inflater.decompress(compressed, MOST_VIEW_BYTES)
    except (binascii.Error, ValueError, zlib.error):
        raise LinkError("the link's view is damaged (cut short in copying?)") from None
    if inflater.unconsumed_tail:
        raise LinkError(f"the link's view is larger than the lab makes (over {MOST_VIEW_BYTES:,} bytes)")
    try:
        pairs = json.loads(text)
    except ValueError:
        raise LinkError("the link's view is damaged (cut short in copying?)") from None
    if not isinstance(pairs, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(part, str) for part in pair) for pair in pairs
    ):
        raise LinkError("the link does not hold a view the lab makes")
    return [tuple(pair) for pair in pairs]
