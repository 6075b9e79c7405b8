"""A class opening the page: 30 phones at once, each the page, every asset it names and plotly.js, with Safari's
and with Chrome's encodings; the wall time and the server's CPU time per phone."""

import harness  # noqa: F401  (first: the environment every scenario runs in)

# isort: split
import asyncio
import re
import statistics
import time

import httpx
from harness import cpu_ms, ms_since

JOIN_PHONES = 30  # a class opening the page at once, each phone with the connections a browser opens
JOIN_REPS = 3
BROWSER_CONNECTIONS = 6
# What a browser accepts: Safari (an iPhone) has no zstd, Chrome has.
ACCEPT_ENCODINGS = {"Safari": "gzip, deflate, br", "Chrome": "gzip, deflate, br, zstd"}


async def time_join(base: str, phones: int, accept_encoding: str) -> dict:
    """Phones opening the page at once: each gets the page, every asset it names and plotly.js (which
    the page fetches when it first draws a chart). The time until the last phone has all of them."""

    async def phone() -> bool:
        limits = httpx.Limits(max_connections=BROWSER_CONNECTIONS)
        headers = {"Accept-Encoding": accept_encoding}
        async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=120) as client:
            page = await client.get("/")
            page.raise_for_status()
            urls = set(re.findall(r'(?:src|href)="(/(?:assets|vendor)/[^"]+)"', page.text))
            urls.add(re.search(r'"plotly": "(/vendor/plotly-[^"]+\.js)"', page.text).group(1))
            answers = await asyncio.gather(*(client.get(url) for url in sorted(urls)))
            return sum(answer.status_code == 200 for answer in [page, *answers]) == len(urls) + 1

    start = time.perf_counter()
    everyone = await asyncio.gather(*(phone() for _ in range(phones)))
    return {"ms": ms_since(start), "everyone_served": all(everyone)}


def measure_join(base: str, pid: int) -> dict:
    """JOIN_PHONES phones at once and one alone, for each browser's encodings: wall time and the server's
    CPU time per phone."""
    found = {}
    for browser, accept_encoding in ACCEPT_ENCODINGS.items():
        samples = {"class": [], "alone": [], "cpu_per_phone": []}
        served = True
        for _ in range(JOIN_REPS):
            before = cpu_ms(pid)
            joined = asyncio.run(time_join(base, JOIN_PHONES, accept_encoding))
            samples["cpu_per_phone"].append((cpu_ms(pid) - before) / JOIN_PHONES)
            samples["class"].append(joined["ms"])
            served = served and joined["everyone_served"]
            samples["alone"].append(asyncio.run(time_join(base, 1, accept_encoding))["ms"])
        found[browser] = {
            **{f"{name}_ms": statistics.median(values) for name, values in samples.items()},
            "everyone_served": served,
        }
    return {"phones": JOIN_PHONES, "browsers": found}


def join_line(join: dict) -> str:
    parts = "; ".join(
        f"{browser}'s encodings: {found['class_ms']:,.0f} ms (one phone alone {found['alone_ms']:,.0f} ms; "
        f"server CPU {found['cpu_per_phone_ms']:,.0f} ms per phone"
        f"{'' if found['everyone_served'] else ', NOT every phone served'})"
        for browser, found in join["browsers"].items()
    )
    return (
        f"A class opens the page ({join['phones']} phones at once, each the page, every asset it names and "
        f"plotly.js, {BROWSER_CONNECTIONS} connections each, median of {JOIN_REPS}): {parts}."
    )
