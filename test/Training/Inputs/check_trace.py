"""Checks a trace that mlt-run --trace wrote, as a user opening it would.

check_trace.py TRACE RANKS [--predicted] [KERNEL@STREAM ...]: the file is
one JSON object in the Trace Event Format (Chrome's and Perfetto's JSON
traces: a "traceEvents" list of objects, each with a phase "ph", complete
events "X" with a name, numeric "ts" and "dur" in microseconds and integer
"pid" and "tid", metadata events "M" naming processes and threads); each of
the RANKS ranks is a process named "rank R" with a thread named for each
stream it used; every launch is a complete event with a kernel name, a
program and an instruction index, a start and a non-negative duration; the
ranks launched the same number of times; and each KERNEL@STREAM given ran
on that stream of every rank. With --predicted, each rank R also has a
process "predicted rank R" (pid RANKS + R) holding the same launches.
Prints one line per rank: its launch count and streams.
"""
import collections
import json
import sys


def check_format(trace):
    """The Trace Event Format's rules for the events mlt-run writes."""
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    for e in trace["traceEvents"]:
        assert isinstance(e, dict) and e.get("ph") in ("X", "M"), e
        assert isinstance(e["name"], str) and e["name"], e
        assert isinstance(e["pid"], int), e
        if e["ph"] == "X":
            assert isinstance(e["tid"], int), e
            for key in ("ts", "dur"):
                assert isinstance(e[key], (int, float)), e
            assert isinstance(e.get("cat", ""), str), e
            assert isinstance(e.get("args", {}), dict), e
        else:
            assert e["name"] in ("process_name", "thread_name",
                                 "process_sort_index"), e
            if e["name"] != "process_sort_index":
                assert isinstance(e["args"]["name"], str), e
            else:
                assert isinstance(e["args"]["sort_index"], int), e


def main():
    args = sys.argv[1:]
    predicted = "--predicted" in args
    args = [a for a in args if a != "--predicted"]
    path, ranks = args[0], int(args[1])
    expected = [arg.split("@") for arg in args[2:]]
    trace = json.load(open(path))
    check_format(trace)
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
    processes = 2 * ranks if predicted else ranks
    assert sorted(names) == list(range(processes)), f"processes {sorted(names)}"
    for rank in range(ranks):
        assert names[rank] == f"rank {rank}", names[rank]
        if predicted:
            assert names[ranks + rank] == f"predicted rank {rank}", names[ranks + rank]
            assert len(launches[ranks + rank]) == len(launches[rank]), (
                f"rank {rank}: {len(launches[rank])} launches measured, "
                f"{len(launches[ranks + rank])} predicted")
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
