#!/usr/bin/env python3
"""rl_loop.py - an RL loop over three nodes: a trainer publishes every step, two workers
always run the latest version.

The trainer (on node 1) learns a policy for a contextual bandit by REINFORCE from the
workers' rollouts and publishes its weights as a new version of the model after every
step (objstore.models.publish; retain=3 drops older versions on every node). Its
backbone is frozen, so from the second version on only the head's tensors are new: the
other parts are referenced, and the workers fetch only the head. Each worker (a process of its own,
on node 2 and node 3) waits for a version newer than the one it runs, loads it into its
module in place (objstore.models.load) and plays a batch with it; it sends the rollout
to the trainer with a forward pass the trainer checks against the weights it published
as that version. Start the nodes first (client/python/README.md, "Examples"):

    for n in 1 2 3; do redis-server conf/cluster-node$n.conf --daemonize yes; done
    build/python-venv/bin/python client/python/examples/rl_loop.py
"""

import multiprocessing as mp
import os
import random
import sys

import torch

import objstore
from objstore import models

STEPS = 30
ROLLOUT = 256  # bandit plays per rollout
CONTEXT, ACTIONS, HIDDEN = 16, 4, 256


def nodes_from_env():
    """[(name, port)] of the three nodes: conf/cluster-node*.conf's, or
    OBJSTORE_EXAMPLE_NODES="name=port,name=port,name=port" (the tests use that)."""
    spec = os.environ.get("OBJSTORE_EXAMPLE_NODES", "node1=7001,node2=7002,node3=7003")
    return [(n, int(p)) for n, p in (item.split("=") for item in spec.split(","))]


def policy():
    torch.manual_seed(0)  # the same initial weights everywhere
    return torch.nn.Sequential(torch.nn.Linear(CONTEXT, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, ACTIONS))


def bandit(batch, gen):
    """Contexts and the reward of each action: 1 for the best action of a fixed rule."""
    x = torch.randn(batch, CONTEXT, generator=gen)
    best = (x[:, :ACTIONS]).argmax(dim=1)
    return x, torch.nn.functional.one_hot(best, ACTIONS).float()


PROBE = torch.randn(8, CONTEXT, generator=torch.Generator().manual_seed(7))


def worker(name, port, model_name, results):
    """Run the latest version until the last one: load each new version in place, play
    a batch of the bandit with it and send the rollout (contexts, actions, rewards) to
    the trainer, with a forward pass of PROBE for the trainer to check."""
    net = policy()
    gen = torch.Generator().manual_seed(sum(name.encode()))
    held = 0
    with objstore.connect("127.0.0.1", port) as c:
        while held < STEPS:
            models.latest(c, model_name, newer_than=held, timeout=120)
            held = models.load(c, model_name, net)  # the latest: it may have moved on
            with torch.no_grad():
                x, reward = bandit(ROLLOUT, gen)
                action = torch.multinomial(torch.softmax(net(x), 1), 1, generator=gen)
                r = reward.gather(1, action).squeeze(1)
                # plain lists: a tensor sent through the queue is shared by a file
                # descriptor the worker may have closed by the time it is read
                results.put((name, held, (x.tolist(), action.squeeze(1).tolist(), r.tolist()),
                             net(PROBE).tolist()))
        results.put((name, None, c.stats()["transfer_downloaded_bytes"], None))


def main():
    nodes = nodes_from_env()
    (trainer_node, trainer_port), others = nodes[0], nodes[1:]
    model_name = f"policy:{random.getrandbits(30)}"
    net = policy()
    for p in list(net[0].parameters()) + list(net[2].parameters()):
        p.requires_grad_(False)  # a frozen backbone: only the head moves
    opt = torch.optim.Adam(net[4].parameters(), lr=0.05)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    seen, rewards, downloaded = {}, [], {}
    with objstore.connect("127.0.0.1", trainer_port) as c:
        models.publish(c, model_name, net, version=1)
        expected = {1: net(PROBE).detach()}
        procs = [ctx.Process(target=worker, args=(n, p, model_name, results)) for n, p in others]
        for p in procs:
            p.start()

        def receive(block):
            """The rollouts the workers sent (at least one when block), each checked:
            the worker ran exactly the weights published as its version."""
            batch = []
            while block or not results.empty():
                name, v, value, out = results.get(timeout=120)
                block = False
                if v is None:
                    downloaded[name] = value
                    continue
                if not torch.allclose(torch.tensor(out), expected[v], rtol=1e-5, atol=1e-6):
                    raise SystemExit(f"{name} ran version {v} with other weights than published")
                seen.setdefault(name, []).append(v)
                batch.append(value)
            return batch

        for step in range(2, STEPS + 1):
            batch = receive(block=True)
            x = torch.tensor([row for b in batch for row in b[0]])
            action = torch.tensor([a for b in batch for a in b[1]])
            r = torch.tensor([q for b in batch for q in b[2]])
            rewards.append(r.mean().item())
            logp = torch.log_softmax(net(x), 1).gather(1, action[:, None]).squeeze(1)
            loss = -((r - r.mean()) * logp).mean()  # REINFORCE with a mean baseline
            opt.zero_grad()
            loss.backward()
            opt.step()
            expected[step] = net(PROBE).detach()
            models.publish(c, model_name, net, retain=3)
        while len(downloaded) < len(others):
            receive(block=True)
        for p in procs:
            p.join(60)
            if p.exitcode != 0:
                raise SystemExit(f"a worker failed (exit {p.exitcode})")
        full = sum(t.numel() * t.element_size() for t in net.state_dict().values())
        print(f"mean reward of the rollouts: {rewards[0]:.2f} at the start, "
              f"{sum(rewards[-5:]) / 5:.2f} over the last 5 steps")
        for name in sorted(seen):
            print(f"{name}: ran {len(seen[name])} versions, up to {seen[name][-1]}; downloaded "
                  f"{downloaded[name]} bytes for them (the model is {full} bytes)")
        print(f"kept on {trainer_node}: versions {models.versions(c, model_name)}")
        print("every worker ran only whole published versions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
