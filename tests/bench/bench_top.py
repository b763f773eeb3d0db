"""jobctl top's memory over many refreshes: peak RSS after --refreshes (1,000)
refreshes of the console on a table of --rows (1,000,000) rows, --expired of them expired.

The console runs headless (Textual's ``run_test``, 100x30) in a process of its own, on the
command's own session and workflows; each refresh is what ``--every`` does (the stuck
view's reads and redraw, --limit rows: 200, as jobctl top's default). Prints the RSS after
1, 10, 100, 250, 500, 750 refreshes and at the end (flat is the point), the peak (the kernel's
ru_maxrss), and the refreshes' median time. The target: a peak of 120 MB or less.
Nothing here asserts::

    python tests/bench/bench_top.py [--rows 1000000] [--refreshes 1000]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from common import arguments, bench_dsn, build_table, machine

TABLE = "bench_top"
TARGET_MB = 120
CHILD = r"""
import asyncio, datetime as dt, json, resource, statistics, sys, time
import psutil
from jobctl import db
from jobctl.cli.top.app import TopApp
from jobctl.cli.top.data import Source
from jobctl.ops import console, sessions

dsn, table, refreshes, limit, view = sys.argv[1:6]
refreshes, limit = int(refreshes), int(limit)
me = psutil.Process()
marks = {}
times = []

async def main():
    settings = db.Settings(dsn=dsn, table=table)
    with sessions.open(settings, sessions.Access("top"), say=lambda line: None) as (s, standing):
        ask = console.Ask(dt.timedelta(seconds=30), limit, view)
        app = TopApp(Source.one(s, standing, ask, writes=False), dt.timedelta(hours=1))
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            if view != "stuck":
                await pilot.press({"review": "2", "summary": "3"}[view])
            await pilot.press("space", "j", "space")  # two marks, kept across refreshes
            for n in range(1, refreshes + 1):
                started = time.perf_counter()
                app.reload()
                await pilot.pause()
                times.append(time.perf_counter() - started)
                if n in (1, 10, 100, 250, 500, 750) or n == refreshes:
                    marks[n] = me.memory_info().rss / 2**20
            assert len(app.marks) == 2
            shown = len(app.shown)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rss": marks, "peak": peak, "median_s": statistics.median(times),
                      "shown": shown}))

asyncio.run(main())
"""


def main() -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--expired", type=int, default=100_000)
    parser.add_argument("--refreshes", type=int, default=1000)
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--view", choices=["stuck", "review", "summary"], default="stuck")
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    dsn = bench_dsn(args.dsn)
    processing = max(args.expired * 2, args.expired + 1000)
    build_table(
        dsn, TABLE, args.rows, processing, args.expired, queued=10_000, rebuild=args.rebuild
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            dsn,
            TABLE,
            str(args.refreshes),
            str(args.limit),
            args.view,
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TEXTUAL": ""},
    ).stdout
    found = json.loads(out.strip().splitlines()[-1])
    rss = found["rss"]
    print(
        f"jobctl top, view {args.view}, {args.rows:,} rows ({args.expired:,} expired, "
        f"{processing:,} processing), {args.refreshes:,} refreshes of {found['shown']} rows:"
    )
    series = ", ".join(f"{int(n):,}: {mb:.1f}" for n, mb in rss.items())
    print(f"  RSS (MB) after N refreshes: {series}")
    verdict = "within" if found["peak"] <= TARGET_MB else "OVER"
    print(f"  peak RSS {found['peak']:.1f} MB ({verdict} the {TARGET_MB} MB target)")
    print(f"  a refresh (reads and redraw): median {found['median_s'] * 1000:.1f} ms")


if __name__ == "__main__":
    main()
