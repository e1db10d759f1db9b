#!/usr/bin/env python3
"""Made examples/tiny_model.pt once, with Debian's torch 1.13 (python3-torch):

    /usr/bin/python3 examples/make_example.py

A small transformer-ish block's state_dict plus the things a training checkpoint carries
(optimizer state, epoch, a config dict), so `make demo` shows every part of `trove info`.
"""
import os

import torch

torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self, vocab=32, dim=16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.norm = torch.nn.LayerNorm(dim)
        self.attn = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied weights: one storage, two keys
        self.register_buffer("mask", torch.tril(torch.ones(8, 8, dtype=torch.bool)))


model = Block()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
model.head(model.norm(model.embed(torch.tensor([[1, 2, 3]])))).sum().backward()
opt.step()
checkpoint = {
    "model": model.state_dict(),
    "optimizer": opt.state_dict(),
    "epoch": 3,
    "config": {"vocab": 32, "dim": 16, "name": "tiny", "dropout": 0.1},
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_model.pt")
torch.save(checkpoint, out)
print("wrote", out, os.path.getsize(out), "bytes")
