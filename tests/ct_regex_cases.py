#!/usr/bin/python3
"""ct_regex_cases.py - the expected results in ct_regex_cases.json are Python's
own re.match (what compressed-tensors matches `re:` targets with); test_check.c
holds gempack's matcher to the same table. Exit 1 on any disagreement."""
import json, os, re, sys, warnings

warnings.simplefilter("ignore", FutureWarning)  # "possible nested set": a case on purpose
cases = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ct_regex_cases.json")))
bad = [c for c in cases if (re.match(c["pattern"], c["name"]) is not None) != c["match"]]
for c in bad:
    print("FAIL:", c)
print(f"{len(cases) - len(bad)} passed, {len(bad)} failed")
sys.exit(1 if bad else 0)
