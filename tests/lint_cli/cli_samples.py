"""Sample training scripts shared by the CLI tests."""

import textwrap

BUGGY = textwrap.dedent(
    """\
    import torch
    optimizer = torch.optim.AdamW(model.parameters())
    for i, batch in enumerate(loader):
        optimizer.zero_grad()
        loss = model(batch) / accum
        loss.backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()
    """
)
CLEAN = BUGGY.replace("    optimizer.zero_grad()\n", "").replace(
    "        optimizer.step()\n", "        optimizer.step()\n        optimizer.zero_grad()\n")

# ACC302, whose fix is unsafe (the saved keys change): a compiled module's state_dict saved (its keys
# start with `_orig_mod.`).
CHECKPOINT = "import torch\nm = torch.compile(m)\ntorch.save(m.state_dict(), 'p')\n"
CHECKPOINT_FIXED = "import torch\nm = torch.compile(m)\ntorch.save(getattr(m, \"_orig_mod\", m).state_dict(), 'p')\n"
# ACC900, whose fix is safe (the syntax tree is unchanged): a noqa that hides nothing.
STALE_NOQA = "lr = 0.1  # noqa: ACC101\n"
STALE_NOQA_FIXED = "lr = 0.1\n"
