"""One line a cell of paired records (the B files a paired run writes, `paired_chain.sh`'s steps): its outcome,
process pairs and looks, the judged rules' changes with their lines (95 %-ish half-widths of the last look's
interval), the counts that moved, where its seconds went, and, where a pair's compiled GPU time moved by over
0.5 %, the kernels that moved most; then the run's totals.

    python tools/probes/paired_summary.py chain0/aa_cold.jsonl chain0/aa_warm.jsonl ...
"""

from __future__ import annotations

import json
import sys


def rule_text(rule: dict) -> str:
    half = (rule["hi"] - rule["lo"]) / 2 * 100
    mark = {"regression": "!", "unsure": "?", "ok": "", "shown": "~"}.get(rule["outcome"], rule["outcome"])
    return f"{rule['side'][:4]} {rule['clock']} {rule['change'] * 100:+.2f}±{half:.2f}{mark}"


def main(paths: list[str]) -> None:
    for path in paths:
        records = [json.loads(line) for line in open(path) if line.strip()]
        paired = [r for r in records if r.get("paired")]
        tally: dict[str, int] = {}
        seconds = {"prepare": 0.0, "looks": 0.0, "finish": 0.0, "total": 0.0}
        print(f"== {path}: {len(paired)} paired of {len(records)} records")
        for r in paired:
            p = r["paired"]
            tally[p["outcome"]] = tally.get(p["outcome"], 0) + 1
            s = p.get("seconds", {})
            for k in seconds:
                seconds[k] += sum(s[k]) if isinstance(s.get(k), list) else s.get(k, 0.0)
            rules = " | ".join(rule_text(x) for x in p.get("rules", []) if x["clock"] in ("wall", "device"))
            moved = [
                f"{c['side'][:4]} {c['count']} {c['a']:g}->{c['b']:g}" for c in p.get("counts", []) if c["a"] != c["b"]
            ]
            # Each pair's side prepared first, "*" where the two prepared at once (records from 1aaaa90 on), "~" where
            # only their first compiled calls took turns (from 1ef0eb0 on).
            order = "".join(
                x["first"].upper() + ("*" if x["together"] else "~" if x.get("staggered") else "")
                for x in p.get("prepared", [])
            )
            print(
                f"  {r['model']:>18} {r['phase']:5} {p['outcome']:10} pairs {p['duets']}{' ' + order if order else ''}"
                f" looks {p['looks']}"
                f" {s.get('total', 0):6.1f} s | {rules}" + (f" | counts {', '.join(moved)}" if moved else "")
            )
            for k in p.get("kernels", []):  # where the GPU time of a moved device step went (paired.kernels)
                if k["side"] == "compiled" and k["a_ms"] and abs(k["b_ms"] / k["a_ms"] - 1) > 0.005:
                    moved = ", ".join(f"{m['kernel'][:40]} {m['b_ms'] - m['a_ms']:+.3f}" for m in k["moved"][:3])
                    print(f"  {'':>18} pair {k['pair']} kernels {k['a_ms']:.2f} -> {k['b_ms']:.2f} ms: {moved}")
            if p.get("error") or p.get("note"):
                print(f"  {'':>18} {(p.get('error') or '')} {p.get('note') or ''}"[:300])
        print(f"  outcomes {tally}; cell seconds " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
