#!/usr/bin/env python3
"""rules_in_docs.py BOOK.txt DOC.md: checks that every rule `mlt-run
--help-layout-rules` prints (BOOK.txt) has its row in the table of DOC.md's
section "## The rule book" (a line starting "| `NAME` |"), and that the
table has no row for a rule the book lacks. Prints the count; exits 1
naming what is missing."""
import re
import sys

book = re.findall(r"^  ([a-z0-9-]+)$", open(sys.argv[1]).read(), re.M)
doc = open(sys.argv[2]).read()
section = doc.split("\n## The rule book\n", 1)[-1].split("\n## ", 1)[0]
rows = re.findall(r"^\| `([a-z0-9-]+)` \|", section, re.M)
missing = [rule for rule in book if rule not in rows]
unknown = [rule for rule in rows if rule not in book]
if missing or unknown or not book:
    print(f"not in the docs: {missing}; not in the book: {unknown}")
    sys.exit(1)
print(f"{len(book)} rules, each in the docs")
