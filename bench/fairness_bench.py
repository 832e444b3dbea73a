#!/usr/bin/env python3
"""Fairness and backpressure of the scheduler (the ``bench.fairness`` package; ``--help`` says what it measures).

.venv/bin/python bench/fairness_bench.py [--seconds 900] [--redis-url redis://127.0.0.1:6379/9]
.venv/bin/python bench/fairness_bench.py --realtime-engine vllm
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fairness.cli import main

if __name__ == "__main__":
    main()
