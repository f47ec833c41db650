#!/usr/bin/python3
"""A worker whose model does not match the job (tests/python/bad_input_test.sh):
`fc.weight` is [3, 9] here and [3, 8] in the job. ServerOptimizer must refuse
it naming the tensor, before anything is pulled or pushed."""
import torch

import pstrain.torch as pst


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(9, 3)


with pst.init() as ctx:
    pst.ServerOptimizer(Net(), ctx)
