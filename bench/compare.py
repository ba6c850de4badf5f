#!/usr/bin/env python3
"""Side-by-side prefill/decode benchmark: kvant vs llama.cpp's llama-bench.

usage: bench/compare.py --llama-bench PATH [--kvant build/kvant] [-t 2] [-p 512] [-n 128] [-r 3] [--rounds K]
                        [-d 0,2048,8192] [--fa off,on] [--tiers avx2,avx512] [--tg-only]
                        MODEL.gguf|KVANT.gguf=LLAMA.gguf [...]

For every model, runs `kvant bench --json` and `llama-bench -o jsonl` with the
same file (or, for a pair KVANT.gguf=LLAMA.gguf, kvant on the first and
llama.cpp on the second: a kvant-only type such as PTQ_Z4_G32 against
llama.cpp's nearest, Q4_1; each one's roofline is then its own file's), threads,
-p and -n, interleaved, and prints one markdown table:
tokens/s of each (mean +- sd), the ratio kvant / llama.cpp, and the decode
roofline = read bandwidth / bytes read per token (all weights except the
token embedding, of which one row is read, unless the output is tied to it;
for experts, the share the router picks).  The bandwidth is measured with
build/kvant-stream right before and right after each decode row, and the
higher of the two is that row's roofline: on a shared machine it moves by
2x within minutes, so one reading for the whole run misstates most rows,
and the ceiling is what the machine could deliver during the row (the mean
let one slow reading pull it under the decode: a Zen 3 Q4_0 row read 104%
with the meter at 32.3 GB/s after it and 45.6 two rows earlier).  The
meter reads a buffer of the row's bytes per token (kvant-stream -m, at
least 16 MiB; at most its default, 4x the L3): a model that fits in the
last-level cache is read from it token after token, so memory's bandwidth
is no ceiling for it (a 136 MiB stories110M decoded at 130% of memory's
"roofline" on a machine with 480 MiB of L3).
Both programs see the same noisy machine; compare the ratios, not the
absolute numbers across runs.

-d D,... (llama-bench's -d): every test also runs with D tokens already in the
cache; a decode step then reads the weights and the KV of D + n/2 positions on
average (KV bytes per position from kvant bench), which is what that row's
roofline counts.  --fa off,on runs llama-bench once per flash-attention
setting (one column and one ratio each); without it llama-bench's default.
--tiers avx2,avx512 runs kvant once per kernel tier (KVANT_TIER), with the
ratio of the last to the first.

--rounds K measures every row K times, the two programs alternating (round
1 runs kvant first, round 2 llama.cpp first, ...), each round between its
own two meter readings.  A cell is then the median of the rounds (min-max
after it) instead of one run's mean +- sd, and a ratio or roofline fraction
is the median of the rounds' own ratios: on these machines the memory
doubles or halves its speed between minutes, so one pass of each program
can land them in different states (a Zen 4 stories110M row at depth 8192
read 1.67x and 2.24x in two rounds minutes apart).
"""
import argparse, json, os, statistics, subprocess


def gguf_weight_bytes(path):
    """bytes a decode step reads, from kvant info --tensors: every tensor but
    token_embd.weight (one row of it is read), unless the output is tied to it
    (then the classifier reads it whole); of the experts' ffn_*_exps only the
    share the router picks (used / count)"""
    out = subprocess.run([ARGS.kvant, "info", "-m", path, "--tensors"], capture_output=True, text=True, check=True).stdout
    tied = "tied to the token embedding" in out
    share = 1.0
    for line in out.splitlines():
        if line.startswith("experts:"):  # "experts:          128, 8 used per token, ..."
            nums = line.split(":", 1)[1].replace(",", " ").split()
            share = int(nums[1]) / int(nums[0])
    total = 0
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[-1] == "bytes" and "." in parts[0] and (tied or parts[0] != "token_embd.weight"):
            total += int(parts[-2]) * (share if "_exps." in parts[0] else 1.0)
    return total


def run_kvant(model, test, depth, tier="", quick=False):
    """(mean t/s, sd, KV bytes per cached position); tier: KVANT_TIER, or "" for the best;
    quick: one rep of 2 tokens (only the KV bytes are wanted)"""
    env = dict(os.environ, KVANT_TIER=tier) if tier else None
    reps, n = (1, 2) if quick else (ARGS.reps, ARGS.n)
    args = [ARGS.kvant, "bench", "-m", model, "-t", str(ARGS.threads), "-r", str(reps), "--json", "-d", str(depth)]
    args += ["-p", str(ARGS.p), "-n", "0"] if test == "pp" else ["-p", "0", "-n", str(n)]
    out = subprocess.run(args, capture_output=True, text=True, check=True, env=env).stdout
    j = json.loads(out.strip().splitlines()[0])
    return j["avg_ts"], j["stddev_ts"], j.get("kv_bytes_per_token", 0)


def run_llama(model, test, depth, fa):
    args = [ARGS.llama_bench, "-m", model, "-t", str(ARGS.threads), "-r", str(ARGS.reps), "-o", "jsonl"]
    args += ["-p", str(ARGS.p), "-n", "0"] if test == "pp" else ["-p", "0", "-n", str(ARGS.n)]
    if depth: args += ["-d", str(depth)]
    if fa: args += ["-fa", fa]
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(ARGS.llama_bench))
    out = subprocess.run(args, capture_output=True, text=True, check=True, env=env).stdout
    j = json.loads([l for l in out.splitlines() if l.startswith("{")][0])
    return j["avg_ts"], j["stddev_ts"]


def bandwidth(footprint):
    """best read GB/s of kvant-stream over a buffer of `footprint` bytes (what
    one decode step reads), capped at its default size (4x the L3)"""
    args = [os.path.join(os.path.dirname(ARGS.kvant), "kvant-stream"), "-t", str(ARGS.threads)]
    l3 = os.sysconf("SC_LEVEL3_CACHE_SIZE") if "SC_LEVEL3_CACHE_SIZE" in os.sysconf_names else 0
    mib = max(16, int(footprint) >> 20)
    if l3 <= 0 or mib < 4 * (l3 >> 20): args += ["-m", str(mib)]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("read"):
            return float(line.split()[1])
    return 0.0


ap = argparse.ArgumentParser()
ap.add_argument("--llama-bench", required=True)
ap.add_argument("--kvant", default="build/kvant")
ap.add_argument("-t", "--threads", type=int, default=2)
ap.add_argument("-p", type=int, default=512)
ap.add_argument("-n", type=int, default=128)
ap.add_argument("-r", "--reps", type=int, default=3)
ap.add_argument("--tg-only", action="store_true", help="decode (tg) rows only, no prefill")
ap.add_argument("-d", "--depth", default="0", help="comma-separated depths (tokens already cached)")
ap.add_argument("--fa", default="", help="llama-bench flash attention settings, comma-separated (e.g. off,on)")
ap.add_argument("--tiers", default="", help="kvant kernel tiers, comma-separated (e.g. avx2,avx512): one column each")
ap.add_argument("--rounds", type=int, default=1,
                help="measure each row K times, kvant and llama.cpp alternating; cells are medians (min-max)")
ap.add_argument("models", nargs="+")
ARGS = ap.parse_args()
if ARGS.rounds < 1: ap.error("--rounds must be at least 1")
KV_PER_POS = {}
TIERS = ARGS.tiers.split(",") if ARGS.tiers else [""]
DEPTHS = [int(d) for d in ARGS.depth.split(",")]
FAS = ARGS.fa.split(",") if ARGS.fa else [""]


def one_round(km, lm, test, depth, footprint, flip):
    """one round of a row: the meter, kvant at every tier and llama.cpp at every
    FA setting (llama.cpp first when flip), the meter again; returns kvant's and
    llama.cpp's (t/s, sd) and the round's ceiling, the higher meter reading"""
    bw0 = bandwidth(footprint) if test == "tg" else 0
    runs = [("kvant", t) for t in TIERS] + [("llama", fa) for fa in FAS]
    got = {}
    for who, x in (runs[::-1] if flip else runs):
        got[who, x] = run_kvant(km, test, depth, x)[:2] if who == "kvant" else run_llama(lm, test, depth, x)
    bw = max(bw0, bandwidth(footprint)) if test == "tg" else 0
    return [got["kvant", t] for t in TIERS], [got["llama", fa] for fa in FAS], bw


def spread(v, fmt="{:.2f}"):
    """a value per round: the value, or median (min-max)"""
    if len(v) == 1: return fmt.format(v[0])
    return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}-{fmt.format(max(v))})"


def cell(runs):
    """(t/s, sd) per round: one run's mean +- sd, or spread of the rounds' means"""
    return f"{runs[0][0]:.2f} ± {runs[0][1]:.2f}" if len(runs) == 1 else spread([r[0] for r in runs])


kcol = ["kvant" + (f" {t}" if t else "") for t in TIERS]
lcol = ["llama.cpp" + (f" FA {fa}" if fa else "") for fa in FAS]
head = ["model", "test"] + [f"{c} t/s" for c in kcol] + [f"{c} ms/token" for c in kcol] + [f"{c} t/s" for c in lcol]
head += [f"{k} / {l}" for k in kcol for l in lcol] + ([f"{kcol[-1]} / {kcol[0]}"] if len(kcol) > 1 else [])
head += ["KV MiB read/token", "read GB/s", "kvant roofline t/s"] + [f"{c} % of roofline" for c in kcol]
head += [f"{c} % of its roofline" for c in lcol]
if ARGS.rounds > 1:
    print(f"Each cell: the median (min-max) of {ARGS.rounds} rounds, kvant and llama.cpp alternating;"
          " a ratio or % is the median of the rounds' own.\n")
print("| " + " | ".join(head) + " |")
print("| --- | --- | " + " | ".join("---:" for _ in head[2:]) + " |")
for m in ARGS.models:
    km, lm = m.split("=", 1) if "=" in m else (m, m)
    wbytes = gguf_weight_bytes(km)
    lbytes = wbytes if lm == km else gguf_weight_bytes(lm)
    label = os.path.basename(km) if lm == km else f"{os.path.basename(km)} vs {os.path.basename(lm)}"
    for depth in DEPTHS:
        for test in (("tg",) if ARGS.tg_only else ("pp", "tg")):
            if test == "tg" and m not in KV_PER_POS:  # KV bytes per cached position, for the meter's buffer
                KV_PER_POS[m] = run_kvant(km, "tg", 0, "", quick=True)[2]
            kvb = KV_PER_POS.get(m, 0) * (depth + ARGS.n / 2) if test == "tg" else 0  # KV read per step, on average
            rounds = [one_round(km, lm, test, depth, wbytes + kvb, r % 2 == 1) for r in range(ARGS.rounds)]
            ks = [[rd[0][i] for rd in rounds] for i in range(len(TIERS))]  # per tier, per round: (t/s, sd)
            ls = [[rd[1][i] for rd in rounds] for i in range(len(FAS))]
            bws = [rd[2] for rd in rounds]
            name = f"{test}{ARGS.p if test == 'pp' else ARGS.n}" + (f" @ d{depth}" if depth else "")
            row = [label, name] + [cell(k) for k in ks]
            row += [f"{1e3 / statistics.median([r[0] for r in k]):.2f}" for k in ks] + [cell(l) for l in ls]
            row += [spread([a[0] / b[0] for a, b in zip(k, l)]) for k in ks for l in ls]
            row += [spread([a[0] / b[0] for a, b in zip(ks[-1], ks[0])])] if len(ks) > 1 else []
            if test == "tg" and wbytes and all(bws):
                roofs = [bw * 1e9 / (wbytes + kvb) for bw in bws]  # each round's own ceiling
                lroofs = [bw * 1e9 / (lbytes + kvb) for bw in bws]
                row += [f"{kvb / 2**20:.1f}", spread(bws, "{:.1f}"), spread(roofs, "{:.1f}")]
                row += [spread([100 * a[0] / r for a, r in zip(k, roofs)], "{:.0f}%") for k in ks]
                row += [spread([100 * a[0] / r for a, r in zip(l, lroofs)], "{:.0f}%") for l in ls]
            else:
                row += ["-"] * (3 + len(ks) + len(ls))
            print("| " + " | ".join(row) + " |", flush=True)
