# -*- coding: utf-8 -*-
"""Helpers for scripts/autobahn (runs under Python 2.7 and 3).

  freeport                          print a free TCP port on 127.0.0.1
  cases  --cases P --exclude P      print the case ids the suite will run, one a line: resolved
                                    against the installed suite's own case list (autobahntestsuite,
                                    else kosoku), with wstest's pattern rules
  spec   --agent A --url U --outdir D --cases P --exclude P [--template F]
                                    print a fuzzingclient spec (JSON): the template's (by default
                                    autobahn/fuzzingclient.json), with these fields set
  check  --index F --agent A --expected F [--title T] [--excluded F]
                                    print a Markdown summary per section; exit 1 unless every
                                    expected case ran and is OK (or INFORMATIONAL) in both
                                    behavior and behaviorClose, and nothing else ran

Patterns are comma-separated ("1.*,2.*,9.1.1").
"""
from __future__ import print_function

import argparse
import json
import re
import socket
import sys

# Cases per section in autobahntestsuite 25.10.1, checked against a real run. Used as a sanity
# check of the installed suite: a whole section ("6.*") must resolve to exactly this many cases.
SECTION_COUNTS = {
    "1": 16, "2": 11, "3": 7, "4": 10, "5": 20, "6": 145, "7": 37,
    "9": 54, "10": 1, "12": 90, "13": 126,
}
SECTION_NAMES = {
    "1": "Framing", "2": "Pings/Pongs", "3": "Reserved Bits", "4": "Opcodes",
    "5": "Fragmentation", "6": "UTF-8 Handling", "7": "Close Handling",
    "9": "Limits/Performance", "10": "Misc",
    "12": "Compression (payloads)", "13": "Compression (parameters)",
}

PASS = ("OK", "INFORMATIONAL")
FAILED = ("FAILED", "WRONG CODE", "UNCLEAN", "FAILED BY CLIENT")


def split_patterns(s):
    return [p.strip() for p in (s or "").split(",") if p.strip()]


def id_tuple(case_id):
    return tuple(int(x) for x in case_id.split("."))


def all_case_ids():
    """Every case id the installed runner knows, and which runner told us."""
    try:
        from autobahntestsuite.case import Cases, CaseCategories, CaseSubCategories, CaseBasename, CaseSetname
        from autobahntestsuite.caseset import CaseSet
        cs = CaseSet(CaseSetname, CaseBasename, Cases, CaseCategories, CaseSubCategories)
        return sorted(cs.CasesIndices.keys(), key=id_tuple), "autobahntestsuite"
    except ImportError:
        pass
    try:
        from kosoku.cases import CASES
        return sorted(CASES.keys(), key=id_tuple), "kosoku"
    except ImportError:
        pass
    raise SystemExit("autobahn_helper: neither autobahntestsuite nor kosoku can be imported by %s" % sys.executable)


def resolve(patterns, known):
    """wstest's rule (caseset.resolveCasePatternList): a pattern with '*' is a regex prefix match with
    '.' literal and '*' any; one without is taken as an exact id."""
    out = []
    for pat in patterns:
        if "*" in pat:
            rx = re.compile(pat.replace(".", "\\.").replace("*", ".*"))
            out.extend(c for c in known if rx.match(c))
        else:
            out.append(pat)
    return out


def cmd_freeport(_args):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
    s.close()


def cmd_cases(args):
    known, source = all_case_ids()
    # Sanity: the suite must hold exactly the sections we expect (same version, complete install).
    per = {}
    for c in known:
        per[c.split(".")[0]] = per.get(c.split(".")[0], 0) + 1
    if per != SECTION_COUNTS:
        sys.stderr.write("autobahn_helper: the %s case list differs from the expected table:\n  got      %s\n  expected %s\n"
                         % (source, sorted(per.items(), key=lambda kv: int(kv[0])),
                            sorted(SECTION_COUNTS.items(), key=lambda kv: int(kv[0]))))
        return 1
    known_set = set(known)
    want = resolve(split_patterns(args.cases), known)
    unknown = sorted(set(c for c in want if c not in known_set))
    if unknown:
        sys.stderr.write("autobahn_helper: unknown case ids: %s\n" % ", ".join(unknown))
        return 1
    drop = set(resolve(split_patterns(args.exclude), known))
    ids = sorted(set(want) - drop, key=id_tuple)
    if not ids:
        sys.stderr.write("autobahn_helper: the patterns select no case\n")
        return 1
    for c in ids:
        print(c)
    return 0


def cmd_spec(args):
    spec = {"exclude-agent-cases": {}}
    if args.template:
        with open(args.template) as f:
            spec.update(json.load(f))
    spec.update({
        "outdir": args.outdir,
        "servers": [{"agent": args.agent, "url": args.url}],
        "cases": split_patterns(args.cases),
        "exclude-cases": split_patterns(args.exclude),
    })
    print(json.dumps(spec, indent=2, sort_keys=True))


def classify(behavior, close):
    both = (behavior, close)
    if all(b in PASS for b in both):
        return "OK"
    if any(b in FAILED for b in both):
        return "FAILED"
    if "NON-STRICT" in both:
        return "NON-STRICT"
    return "other"


def cmd_check(args):
    with open(args.expected) as f:
        expected = [line.strip() for line in f if line.strip()]
    title = args.title or args.agent
    problems = []
    try:
        with open(args.index) as f:
            index = json.load(f)
    except (IOError, OSError, ValueError) as e:
        print("### %s\n\nno usable report at %s: %s\n" % (title, args.index, e))
        return 1
    if args.agent in index:
        results = index[args.agent]
    elif len(index) == 1:
        (other, results), = index.items()
        problems.append("report agent is %r, not %r (taken as the same server)" % (other, args.agent))
    else:
        print("### %s\n\nagent %r not in report (agents: %s)\n" % (title, args.agent, ", ".join(sorted(index))))
        return 1

    exp_set = set(expected)
    sections = []
    rows = {}
    for c in expected:
        sec = c.split(".")[0]
        if sec not in rows:
            sections.append(sec)
            rows[sec] = {"cases": 0, "OK": 0, "NON-STRICT": 0, "FAILED": 0, "other": 0, "missing": 0}
        rows[sec]["cases"] += 1
    failing = []
    for c in expected:
        row = rows[c.split(".")[0]]
        r = results.get(c)
        if r is None:
            row["missing"] += 1
            failing.append((c, None, None))
            continue
        b, bc = r.get("behavior", "?"), r.get("behaviorClose", "?")
        k = classify(b, bc)
        row[k] += 1
        if k != "OK":
            failing.append((c, b, bc))
    extra = sorted((c for c in results if c not in exp_set), key=id_tuple)
    if extra:
        problems.append("%d case(s) ran that were not selected: %s" % (len(extra), ", ".join(extra[:20])))

    cols = ["cases", "OK", "NON-STRICT", "FAILED", "other", "missing"]
    print("### %s\n" % title)
    print("| section | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    total = dict((k, 0) for k in cols)
    for sec in sections:
        name = SECTION_NAMES.get(sec, "")
        print("| %s %s | " % (sec, name) + " | ".join(str(rows[sec][k]) for k in cols) + " |")
        for k in cols:
            total[k] += rows[sec][k]
    print("| **total** | " + " | ".join("**%d**" % total[k] for k in cols) + " |")
    print()
    ran = len(results)
    print("cases expected: %d, ran: %d, strict OK: %d" % (len(expected), ran, total["OK"]))
    if args.excluded:
        print("excluded: %s" % args.excluded)
    if failing:
        print("\nfailing cases (behavior / behaviorClose):\n")
        for c, b, bc in sorted(failing, key=lambda t: id_tuple(t[0])):
            if b is None:
                print("- %s: did not run" % c)
                continue
            dur = results.get(c, {}).get("duration")
            rc = results.get(c, {}).get("remoteCloseCode")
            extra_info = []
            if rc is not None:
                extra_info.append("close code %s" % rc)
            if dur is not None:
                extra_info.append("%s ms" % dur)
            print("- %s: %s / %s%s" % (c, b, bc, (" (" + ", ".join(extra_info) + ")") if extra_info else ""))
    for p in problems:
        print("\nnote: " + p)
    ok = not failing and not extra and ran == len(expected)
    print("\nverdict: %s\n" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    sub.add_parser("freeport")
    p = sub.add_parser("cases")
    p.add_argument("--cases", required=True)
    p.add_argument("--exclude", default="")
    p = sub.add_parser("spec")
    for a in ("--agent", "--url", "--outdir", "--cases"):
        p.add_argument(a, required=True)
    p.add_argument("--exclude", default="")
    p.add_argument("--template")
    p = sub.add_parser("check")
    for a in ("--index", "--agent", "--expected"):
        p.add_argument(a, required=True)
    p.add_argument("--title")
    p.add_argument("--excluded")
    args = ap.parse_args()
    fn = {"freeport": cmd_freeport, "cases": cmd_cases, "spec": cmd_spec, "check": cmd_check}.get(args.cmd)
    if fn is None:
        ap.print_help()
        return 2
    return fn(args) or 0


if __name__ == "__main__":
    sys.exit(main())
