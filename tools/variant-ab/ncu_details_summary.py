"""One line per profiled kernel from Nsight Compute's text details
(`ncu -i REPORT --page details --print-details all`, the form
tools/variant-ab/ncu-compare writes), flashcore and cuDNN kernels in the
order they were profiled (tools/profile-prefill: flashcore, then cuDNN, a
shape at a time), and each cuDNN kernel's cycles against the flashcore
kernel before it.

  python3 ncu_details_summary.py DETAILS.txt
"""
import re
import sys

# (column, metric name in the details)
COLUMNS = [
    ("us", "Duration"),
    ("SM GHz", "SM Frequency"),
    ("cycles", "Elapsed Cycles"),
    ("DRAM %", "DRAM Throughput"),
    ("L2 hit %", "L2 Hit Rate"),
    ("issue %", "Issue Slots Busy"),
    ("wait", "Stall Wait"),
    ("barrier", "Stall Barrier"),
    ("long sb", "Stall Long Scoreboard"),
    ("mio", "Stall MIO Throttle"),
]


# Duration units as ncu prints them (short or long form), in microseconds.
TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}


def kernels(text):
    """[(kernel name, {metric: value})] in the order of the file."""
    out = []
    for line in text.splitlines():
        head = re.match(r"^  (\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)", line)
        if head:
            out.append((head.group(1), {}))
            continue
        if not out:
            continue
        m = re.match(r"^\s{4}(\S.*?)\s{2,}(\S*)\s+([\d,]+(?:\.\d+)?)\s*$", line)
        if m and m.group(1) not in out[-1][1]:  # the first table that names a metric wins
            value = float(m.group(3).replace(",", ""))
            # ncu picks the unit of a duration by its size (us, ms, ...): the us column takes them all
            if m.group(1) == "Duration":
                value *= TO_US.get(m.group(2), 1.0)
            out[-1][1][m.group(1)] = value
    return out


def cell(value):
    """A value as the table prints it: whole numbers from 1e5 up without an exponent."""
    return f"{value:.0f}" if abs(value) >= 1e5 else f"{value:g}"


def short(name):
    """A kernel's name in a few words: flashcore's tile and variant, cuDNN's tile."""
    if name.startswith("cudnn"):
        tile = re.search(r"(\d+x\d+x\d+)_\dx", name)
        return "cudnn " + tile.group(1) if tile else "cudnn"
    m = re.search(r"KernelTraits<[^,]+, (\d+), (\d+), (\d+), (\d+), (\d), (\d), (\d), (\d)>", name)
    if m:
        d, bm, bn, st, serving, cl, fold, nt = m.groups()
        return f"flashcore d{d} m{bm} n{bn}" + (f" c{cl}" if cl != "1" else "") + (" nt" if nt == "1" else "")
    return name[:40]


def main():
    ks = kernels(open(sys.argv[1]).read())
    print("kernel".ljust(28) + "".join(" " + c.rjust(9) for c, _ in COLUMNS) + "  cycles vs flashcore")
    last_fc = None
    for name, m in ks:
        cells = [cell(m[k]) if k in m else "-" for _, k in COLUMNS]
        tail = ""
        if name.startswith("cudnn") and last_fc and "Elapsed Cycles" in m:
            tail = f"  {m['Elapsed Cycles'] / last_fc - 1:+.1%}"
        elif "Elapsed Cycles" in m:
            last_fc = m["Elapsed Cycles"]
        print(short(name).ljust(28) + "".join(" " + c.rjust(9) for c in cells) + tail)


if __name__ == "__main__":
    main()
