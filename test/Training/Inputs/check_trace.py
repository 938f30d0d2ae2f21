"""Checks a trace that mlt-run --trace wrote, as a user opening it would.

check_trace.py TRACE RANKS [KERNEL@STREAM ...]: the file is one JSON object
with a "traceEvents" list; each of the RANKS ranks is a process named
"rank R" with a thread named for each stream it used; every launch is a
complete event ("X") with a kernel name, a program and an instruction index,
a start and a non-negative duration; the ranks launched the same number of
times; and each KERNEL@STREAM given ran on that stream of every rank. Prints
one line per rank: its launch count and streams.
"""
import collections
import json
import sys


def main():
    path, ranks = sys.argv[1], int(sys.argv[2])
    expected = [arg.split("@") for arg in sys.argv[3:]]
    trace = json.load(open(path))
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    launches = collections.defaultdict(list)
    for e in events:
        if e["ph"] != "X":
            continue
        assert e["dur"] >= 0 and e["ts"] >= 0, e
        assert e["args"]["program"] and e["args"]["instruction"] >= 0, e
        assert (e["pid"], e["tid"]) in threads, f"no thread name for {e}"
        launches[e["pid"]].append(e)
    assert sorted(names) == list(range(ranks)), f"processes {sorted(names)}"
    for rank in range(ranks):
        assert names[rank] == f"rank {rank}", names[rank]
    counts = {len(launches[rank]) for rank in range(ranks)}
    assert len(counts) == 1 and counts != {0}, f"launch counts {counts}"
    for rank in range(ranks):
        for kernel, stream in expected:
            assert any(e["name"] == kernel and e["tid"] == int(stream)
                       for e in launches[rank]), f"rank {rank}: no {kernel} on stream {stream}"
        streams = sorted({e["tid"] for e in launches[rank]})
        print(f"rank {rank}: {len(launches[rank])} launches, streams "
              + ", ".join(threads[(rank, s)] for s in streams))


if __name__ == "__main__":
    main()
