"""Which examples a rank trains on, as worker/data does it, so a Python
worker and a C++ worker of the same job see the same data.

Examples have global ids: rank r of N with local batch b at step t takes ids
[t*N*b + r*b, t*N*b + (r+1)*b) (first_example_id). Id -> (epoch = id // n,
position = id % n) -> row perm_epoch[position], where perm_epoch is a
permutation seeded by (data.seed, epoch) (EpochSampler): each example is
seen by exactly one worker once per epoch, reshuffled every epoch.

load_job_data() reads the job's own file data (digits, breast_cancer, csv)
with the same seeded train/test split, mean imputation and standardisation
as worker/data/file_data.cc, bit for bit (sequential double sums).
"""

import os
import subprocess
import tempfile

import numpy as np

from pstrain._proto import pb
from pstrain.errors import invalid

_MASK = (1 << 64) - 1
_SPLIT_TAG = 0x73706C6974  # "split"
_SHUFFLE_TAG = 0x73687566666C  # "shuffl"


def _next_random(state):
    """splitmix64: (new state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & _MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return state, z ^ (z >> 31)


def _hash(a, b):
    _, out = _next_random((a ^ ((b * 0xD1B54A32D192ED03) & _MASK)) & _MASK)
    return out


def seeded_permutation(count, seed):
    """worker/data/file_data.cc SeededPermutation (Fisher-Yates over
    splitmix64 with a multiply-shift draw)."""
    order = list(range(count))
    state = seed & _MASK
    for i in range(count - 1, 0, -1):
        state, r = _next_random(state)
        j = (r * (i + 1)) >> 64
        order[i], order[j] = order[j], order[i]
    return np.array(order, dtype=np.int64)


def first_example_id(step, rank, world, local_batch):
    return step * world * local_batch + rank * local_batch


def test_slice_range(size, rank, world):
    if world < 1 or not 0 <= rank < world:
        raise invalid(f"rank {rank} of {world}")
    return size * rank // world, size * (rank + 1) // world


class EpochSampler:
    """Global example id -> row of a training set of `size` rows."""

    def __init__(self, size, data_seed):
        if size < 1:
            raise invalid("the training set is empty")
        self.size = size
        self._seed = _hash(data_seed, _SHUFFLE_TAG)
        self._epoch = None
        self._order = None

    def permutation(self, epoch):
        if epoch != self._epoch:
            self._order = seeded_permutation(self.size, _hash(self._seed, epoch))
            self._epoch = epoch
        return self._order

    def rows(self, first_id, n):
        """Rows of ids first_id .. first_id + n - 1 (an int64 array)."""
        out = np.empty(n, dtype=np.int64)
        for k in range(n):  # at most two epochs per batch: cheap
            i = first_id + k
            out[k] = self.permutation(i // self.size)[i % self.size]
        return out


class JobData:
    """A job's file data after the split: train/test features (float32,
    rows x features) and labels (int64 classes, or float32 targets)."""

    def __init__(self, train_x, train_y, test_x, test_y, num_classes, seed):
        self.train_x, self.train_y = train_x, train_y
        self.test_x, self.test_y = test_x, test_y
        self.num_classes = num_classes
        self.seed = seed


def _read_table(config):
    d = config.data
    src = d.source
    if src == pb.DataConfig.DIGITS or src == pb.DataConfig.BREAST_CANCER:
        name = "digits.csv" if src == pb.DataConfig.DIGITS else "breast_cancer.csv"
        path = d.path or os.path.join(d.dir, name)
    elif src == pb.DataConfig.CSV:
        path = d.path
    else:
        raise invalid(
            f"data.source {pb.DataConfig.DataSource.Name(src).lower()}: the "
            "Python worker reads the job's file data (digits, breast_cancer, "
            "csv); give your own data to pstrain.torch.shard() instead")
    if not os.path.isfile(path):
        raise invalid(f"data file '{path}' not found (./psctl setup extracts "
                      "the built-in data sets)")
    if src == pb.DataConfig.DIGITS:
        table = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
        return table[:, :-1].astype(np.float32), table[:, -1]
    if src == pb.DataConfig.BREAST_CANCER:
        table = np.loadtxt(path, delimiter=",", dtype=np.float64, skiprows=1,
                           ndmin=2)
        return table[:, :-1].astype(np.float32), table[:, -1]
    with open(path) as f:
        header = [h.strip().strip('"') for h in f.readline().split(",")]
    if d.label_column not in header:
        raise invalid(f"{path}:1: no column '{d.label_column}' "
                      "(data.label_column)")
    table = np.genfromtxt(path, delimiter=",", skip_header=1, dtype=np.float64,
                          missing_values=["", "NA", "nan"], filling_values=np.nan,
                          ndmin=2)
    li = header.index(d.label_column)
    x = np.delete(table, li, axis=1).astype(np.float32)
    return x, table[:, li]


def load_job_data(config):
    """The job's file data (`config`: a JobConfig), split and scaled as the
    C++ worker does."""
    d = config.data
    x, y = _read_table(config)
    rows, dim = x.shape
    if d.num_classes >= 2:
        distinct = np.unique(y)
        labels = np.searchsorted(distinct, y).astype(np.int64)
        classes = len(distinct)
    else:
        labels = y.astype(np.float32)
        classes = 1
    order = seeded_permutation(rows, _hash(d.seed, _SPLIT_TAG))
    test_rows = int(np.floor(rows * d.test_fraction + 0.5))
    if rows - test_rows < 1:
        raise invalid(f"data.test_fraction {d.test_fraction} leaves no "
                      f"training rows of {rows}")
    test = np.sort(order[:test_rows])
    train = np.sort(order[test_rows:])
    xd = x.astype(np.float64)
    nan = np.isnan(xd)
    tr = xd[train]
    present = ~np.isnan(tr)
    # Sequential sums (cumsum) as the C++ loops add, for equal roundings.
    sums = np.cumsum(np.where(present, tr, 0.0), axis=0)[-1]
    counts = present.sum(axis=0)
    fill = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
    xd = np.where(nan, fill[None, :], xd)
    mean = np.zeros(dim)
    scale = np.ones(dim)
    if d.standardize:
        tr = xd[train]
        mean = np.cumsum(tr, axis=0)[-1] / len(train)
        sq = np.cumsum((tr - mean) * (tr - mean), axis=0)[-1]
        sd = np.sqrt(sq / len(train))
        const = tr.min(axis=0) == tr.max(axis=0)
        scale = np.where(const | ~(sd > 0), 1.0, sd)
    xs = ((xd - mean) / scale).astype(np.float32)
    return JobData(xs[train], labels[train], xs[test], labels[test], classes,
                   d.seed)


_EXPORT_MAGIC = b"PSDATA1\n"
_EXPORT_HEADER = ("rank", "world", "from_step", "to_step", "slice", "train_n",
                  "dim", "num_cat", "test_n")


class StepData:
    """One rank's examples of steps from_step .. to_step - 1 as the C++
    worker generates them (`ps_report data-export`, for data that is
    addressed by example id: data.source synthetic): `train_x` [n, dim]
    float32, `train_y` [n] (int64 classes or float32 targets), `train_cat`
    [n, num_cat] uint64 categorical ids (data.sparse_columns), rows in step
    order, `slice` rows per step; `test_*` the whole test set."""

    def __init__(self, header, train, test, num_classes, seed):
        for k, v in header.items():
            setattr(self, k, v)
        self.train_x, self.train_y, self.train_cat = train
        self.test_x, self.test_y, self.test_cat = test
        self.num_classes = num_classes
        self.seed = seed

    def step_rows(self, step):
        """Row range of `step` in the train arrays."""
        if not self.from_step <= step < self.to_step:
            raise invalid(f"step {step}: the export holds steps "
                          f"{self.from_step}..{self.to_step - 1}")
        lo = (step - self.from_step) * self.slice
        return lo, lo + self.slice


def read_export(path, num_classes=2, seed=0):
    """A `ps_report data-export` file (tools/report/data_export.h) as a
    StepData; INVALID_ARGUMENT naming the file when it is not one."""
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:8] != _EXPORT_MAGIC or len(blob) < 8 + 8 * len(_EXPORT_HEADER):
        raise invalid(f"{path}: not a ps_report data-export file")
    values = np.frombuffer(blob, dtype="<i8", count=len(_EXPORT_HEADER),
                           offset=8)
    h = dict(zip(_EXPORT_HEADER, (int(v) for v in values)))
    at = 8 + 8 * len(_EXPORT_HEADER)

    def take(dtype, count, shape):
        nonlocal at
        size = np.dtype(dtype).itemsize * count
        if at + size > len(blob):
            raise invalid(f"{path}: truncated (header {h})")
        a = np.frombuffer(blob, dtype=dtype, count=count, offset=at)
        at += size
        return a.reshape(shape)

    def part(n):
        x = take("<f4", n * h["dim"], (n, h["dim"]))
        y = take("<f4", n, (n,))
        cat = take("<u8", n * h["num_cat"], (n, h["num_cat"]))
        y = y.astype(np.int64) if num_classes >= 2 else y.copy()
        return x, y, cat

    train, test = part(h["train_n"]), part(h["test_n"])
    if at != len(blob):
        raise invalid(f"{path}: {len(blob) - at} bytes after the data")
    return StepData(h, train, test, num_classes, seed)


def export_step_data(config, rank, tool=None):
    """This rank's examples of the whole run and the test set of the job
    `config` (a JobConfig), made by the C++ generator through `ps_report
    data-export` (`tool`, default $PSTRAIN_REPORT, which psctl sets)."""
    tool = tool or os.environ.get("PSTRAIN_REPORT", "")
    if not tool or not os.access(tool, os.X_OK):
        raise invalid(
            f"PSTRAIN_REPORT ('{tool}'): the ps_report binary is needed to "
            "generate data.source synthetic (psctl sets it; `./psctl build` "
            "builds it)")
    with tempfile.TemporaryDirectory(prefix="pstrain-data-") as tmp:
        spec = os.path.join(tmp, "job_spec.pb")
        with open(spec, "wb") as f:
            f.write(config.SerializeToString())
        out = os.path.join(tmp, "rank.psdata")
        done = subprocess.run(
            [tool, "data-export", "--job_spec", spec, "--rank", str(rank),
             "--out", out], capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise invalid(f"ps_report data-export (rank {rank}): "
                          f"{done.stderr.strip()}")
        return read_export(out, config.data.num_classes, config.data.seed)
