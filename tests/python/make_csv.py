#!/usr/bin/python3
"""A small seeded classification table for the Python worker's tests:
usage: make_csv.py OUT.csv ROWS FEATURES CLASSES SEED (a header row, then
numeric features f0..fK-1 and an integer `label` from a random linear
teacher)."""
import sys

import numpy as np

out, rows, features, classes, seed = sys.argv[1], *map(int, sys.argv[2:6])
rng = np.random.default_rng(seed)
x = rng.normal(size=(rows, features)).round(4)
teacher = rng.normal(size=(features, classes))
y = (x @ teacher).argmax(1)
with open(out, "w") as f:
    f.write(",".join([f"f{i}" for i in range(features)] + ["label"]) + "\n")
    for row, label in zip(x, y):
        f.write(",".join(f"{v:g}" for v in row) + f",{label}\n")
