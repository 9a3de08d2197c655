"""bench_tcp_tables.py - the Markdown tables of `make bench` (bench/compare-tcp.sh).

Reads bench-tcp.csv by column name and prints bench-tcp.md: throughput,
latency with the CPU microseconds per operation of every server next to it,
the zero-copy pin variants, and the ratios issue 12's targets are stated in
(4 KiB fetch p50 and CPU against GET, large fetches against iperf3's single
stream and, with 4 clients, against GET; pin + release and pin + read
against GET), each marked met or not. Kept apart from the shell script because the ratios
pick rows by size and client count, which is clumsy in awk.

Usage: bench_tcp_tables.py CSV NCPUS REPEAT CMDLINE GET64_P50 GET64_CPU
                           PIN64_P50 PINCACHE64_P50
"""

import csv
import sys


def num(v):
    """The float in v, or None for "", "n/a" and anything else unparsable."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def fmt(v, unit="", digits=3):
    """v with digits decimals and unit, or n/a."""
    return "n/a" if v is None else f"{v:.{digits}f}{unit}"


def div(a, b):
    """a / b, or None when either is missing or b is 0."""
    return None if a is None or b is None or b == 0 else a / b


def verdict(value, target, higher_is_better):
    """'met' / 'not met' / 'n/a' for a ratio against its target."""
    if value is None:
        return "n/a"
    ok = value >= target if higher_is_better else value <= target
    return "met" if ok else "not met"


def main(argv):
    if len(argv) != 9:
        sys.exit(__doc__)
    path, ncpus, repeat, cmdline = argv[1:5]
    get64_p50, get64_cpu, pin64_p50, pinc64_p50 = (num(v) for v in argv[5:9])
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))

    def row(size, clients):
        for r in rows:
            if r["size"] == size and r["clients"] == str(clients):
                return r
        return None

    def val(r, key):
        return None if r is None else num(r[key])

    out = []
    p = out.append
    p(f"Command: `{cmdline}`; loopback 127.0.0.1, {ncpus} CPUs shared with other jobs, "
      f"best of {repeat} runs each (the best run's CPU figures).")
    p("")
    p("Throughput (MB/s, 10^6 bytes/s):")
    p("")
    p("| size | clients | fetch MB/s (TCP) | fetch FROM A MB/s | redis GET MB/s | fetch/GET "
      "| FROM/GET | pin+read MB/s | pin/GET "
      "| pin+read, cache + prefault | cached/GET | iperf3 MB/s (c streams) | fetch/iperf3 "
      "| fetch/iperf3 1 stream | FROM/iperf3 1 stream |")
    p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        iperf1 = num(r["iperf3_1_mb_s"])
        p(f"| {r['size']} | {r['clients']} | {r['fetch_mb_s']} | {r['fetch_from_mb_s']} "
          f"| {r['redis_get_mb_s']} | {fmt(num(r['fetch_vs_redis']), 'x', 2)} "
          f"| {fmt(div(num(r['fetch_from_mb_s']), num(r['redis_get_mb_s'])), 'x', 2)} "
          f"| {r['pin_mb_s']} "
          f"| {fmt(num(r['pin_vs_redis']), 'x', 2)} | {r['pin_cache_mb_s']} "
          f"| {fmt(num(r['pin_cache_vs_redis']), 'x', 2)} | {r['iperf3_mb_s']} "
          f"| {fmt(num(r['fetch_vs_iperf3']), 'x', 2)} "
          f"| {fmt(num(r['fetch_vs_iperf3_1']), 'x', 2)} "
          f"| {fmt(div(num(r['fetch_from_mb_s']), iperf1), 'x', 2)} |")
    p("")
    p("Latency (ms, p50 / p99) and server CPU per operation (us, INFO cpu: used_cpu_sys + "
      "used_cpu_user of every thread; fetch: node A (source) + node B (destination) over "
      "obj-benchmark's timed phases, the publish of each replica included, the setup and "
      "the deletes between rounds not; GET: the Redis server over the run, per GET call). "
      "\"FROM\" = OBJ.FETCH ... FROM A, the location hint that skips the directory lookup:")
    p("")
    p("| size | clients | fetch | fetch CPU us/op A + B = both | fetch FROM A | FROM CPU us/op "
      "A + B | redis GET | GET CPU us/op | fetch/GET p50 | FROM/GET p50 | fetch/GET CPU "
      "| FROM/GET CPU |")
    p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        get_p50, get_cpu = num(r["redis_get_p50_ms"]), num(r["redis_get_cpu_us"])
        p(f"| {r['size']} | {r['clients']} | {r['fetch_p50_ms']} / {r['fetch_p99_ms']} "
          f"| {r['fetch_cpu_a_us']} + {r['fetch_cpu_b_us']} = {r['fetch_cpu_us']} "
          f"| {r['fetch_from_p50_ms']} / {r['fetch_from_p99_ms']} "
          f"| {r['fetch_from_cpu_us']} | {r['redis_get_p50_ms']} / {r['redis_get_p99_ms']} "
          f"| {r['redis_get_cpu_us']} | {fmt(num(r['fetch_p50_vs_redis']), 'x', 2)} "
          f"| {fmt(div(num(r['fetch_from_p50_ms']), get_p50), 'x', 2)} "
          f"| {fmt(num(r['fetch_cpu_vs_redis']), 'x', 2)} "
          f"| {fmt(div(num(r['fetch_from_cpu_us']), get_cpu), 'x', 2)} |")
    p("")
    p("Local zero-copy (ms, p50 / p99 for pin + read every byte + release; p50 for pin + "
      "release alone, --no-read); \"cache\" = the client library's pin cache (obj-benchmark "
      "--pin-cache: lazy releases in pipelined batches of 33, repeated ids served locally), "
      "\"prefault\" = objClientSetPinPrefault(64 KiB) (--prefault: one madvise fills the page "
      "tables of a pinned object instead of a fault per page):")
    p("")
    p("| size | clients | pin+read | pin+read, cache + prefault | pin+release "
      "| pin+release, cache |")
    p("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        p(f"| {r['size']} | {r['clients']} | {r['pin_p50_ms']} / {r['pin_p99_ms']} "
          f"| {r['pin_cache_p50_ms']} / {r['pin_cache_p99_ms']} | {r['pin_noread_p50_ms']} "
          f"| {r['pin_cache_noread_p50_ms']} |")
    p("")

    # The targets, as issue 12 states them.
    sizes = []
    for r in rows:
        if r["size"] not in sizes:
            sizes.append(r["size"])
    r4k1 = row("4k", 1)
    p(f"Reference of the same run: Redis GET 64 B p50 {fmt(get64_p50, ' ms')} "
      f"({fmt(get64_cpu, ' us', 1)} CPU per GET); pin + release 64 B p50 "
      f"{fmt(pin64_p50, ' ms')}, with the pin cache {fmt(pinc64_p50, ' ms')}.")
    p("")
    p("| issue 12 target | value | target | |")
    p("|---|---:|---:|---|")
    get_p50, get_cpu = val(r4k1, "redis_get_p50_ms"), val(r4k1, "redis_get_cpu_us")
    for label, v, target in (
            ("4 KiB fetch p50 / GET p50, 1 client, FROM",
             div(val(r4k1, "fetch_from_p50_ms"), get_p50), 2),
            ("4 KiB fetch p50 / GET p50, 1 client, directory lookup",
             div(val(r4k1, "fetch_p50_ms"), get_p50), 3),
            ("4 KiB CPU per fetch (A + B) / CPU per GET, 1 client, FROM",
             div(val(r4k1, "fetch_from_cpu_us"), get_cpu), 5)):
        p(f"| {label} | {fmt(v, 'x', 2)} | <= {target}x | {verdict(v, target, False)} |")
    for size in sizes:
        if size in ("4k", "64k"):
            continue
        r1 = row(size, 1)
        r4 = row(size, 4)
        target = 0.7 if size == "1m" else 0.9
        for label, v in (("", val(r1, "fetch_vs_iperf3_1")),
                         (", FROM", div(val(r1, "fetch_from_mb_s"), val(r1, "iperf3_1_mb_s")))):
            p(f"| fetch MB/s / iperf3 single stream, {size}, 1 client{label} "
              f"| {fmt(v, 'x', 2)} | >= {target}x | {verdict(v, target, True)} |")
        if r4 is not None:
            for label, v in (("", val(r4, "fetch_vs_redis")),
                             (", FROM", div(val(r4, "fetch_from_mb_s"),
                                            val(r4, "redis_get_mb_s")))):
                p(f"| fetch MB/s / GET MB/s, {size}, 4 clients{label} "
                  f"| {fmt(v, 'x', 2)} | >= 1.0x | {verdict(v, 1.0, True)} |")
    for label, v in (("pin + release p50 / GET 64 B p50", pin64_p50),
                     ("pin + release p50 / GET 64 B p50, pin cache", pinc64_p50)):
        ratio_v = div(v, get64_p50)
        p(f"| {label} | {fmt(ratio_v, 'x', 2)} | <= 1.5x | {verdict(ratio_v, 1.5, False)} |")
    for label, key, small in (("pin + release p50, largest / 64 B", "pin_noread_p50_ms",
                               pin64_p50),
                              ("pin + release p50, largest / 64 B, pin cache",
                               "pin_cache_noread_p50_ms", pinc64_p50)):
        big = val(row(sizes[-1], 1), key) if sizes else None
        ratio_v = div(big, small)
        p(f"| {label} ({sizes[-1] if sizes else '?'}, 1 client) | {fmt(ratio_v, 'x', 2)} "
          f"| does not grow (<= 1.5x) | {verdict(ratio_v, 1.5, False)} |")
    for c in (1, 4):
        r = row("1m", c)
        if r is None:
            continue
        for label, key in (("pin + read MB/s / GET MB/s, 1 MiB", "pin_vs_redis"),
                           ("pin + read MB/s / GET MB/s, 1 MiB, pin cache + prefault",
                            "pin_cache_vs_redis")):
            v = val(r, key)
            p(f"| {label}, {c} client(s) | {fmt(v, 'x', 2)} | >= 4x | {verdict(v, 4, True)} |")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv)
