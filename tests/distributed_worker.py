"""One process of the two-process data-parallel test (test_distributed.py).

Run as a script, it joins a ``jax.distributed`` job on the loopback
interface (gloo collectives between the CPU processes, ``--local-devices``
host devices each), runs ``STEPS`` training steps of the ``train`` job
(synchronized batch norm across all processes' devices) on its part of each
global batch, and writes the losses and parameters it ends with to ``--out``
(``.npz``). Imported, :func:`train_steps` computes the same in one process.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

STEPS = 3
GLOBAL_BATCH = 32


def train_steps(mesh, put_batch: Callable[[np.ndarray], object]) -> dict[str, np.ndarray]:
    """``STEPS`` data-parallel steps of an ensemble of 2; losses and final parameters."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jax_aclnn.cli import train

    data = train.load_data(None, None, seed=0)
    optimizer = optax.adam(1e-2)
    keys = jax.random.split(jax.random.key(0), 2)
    params = jax.vmap(lambda k: train.init_params(k, data.x_train.shape[1]))(keys)
    state = jax.vmap(optimizer.init)(params)
    params, state = jax.device_put((params, state), NamedSharding(mesh, P()))
    step, _ = train.make_steps(optimizer, jnp.float32, mesh)
    losses = []
    for s in range(STEPS):
        rows = slice(s * GLOBAL_BATCH, (s + 1) * GLOBAL_BATCH)
        params, state, loss = step(params, state, put_batch(data.x_train[rows]),
                                   put_batch(data.y_train[rows]))
        losses.append(np.asarray(loss.addressable_data(0)))
    out = {"losses": np.stack(losses)}
    for i, value in enumerate(params):
        out[f"w{i}"] = np.asarray(value.addressable_data(0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--coordinator", required=True, help="host:port of process 0")
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--local-devices", type=int, default=2)
    parser.add_argument("--out", required=True, help="where to write the results (.npz)")
    args = parser.parse_args()

    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_num_cpu_devices", args.local_devices)
    jax.distributed.initialize(args.coordinator, num_processes=args.num_processes,
                               process_id=args.process_id, initialization_timeout=60)
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from jax_aclnn.cli import train

    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    mesh = Mesh(np.array(devices), (train.BATCH_AXIS,), axis_types=(jax.sharding.AxisType.Auto,))
    sharding = NamedSharding(mesh, P(train.BATCH_AXIS))
    per_process = GLOBAL_BATCH // args.num_processes
    mine = slice(args.process_id * per_process, (args.process_id + 1) * per_process)

    def put_batch(batch: np.ndarray):  # this process feeds only its rows
        return jax.make_array_from_process_local_data(sharding, batch[mine], batch.shape)

    np.savez(args.out, **train_steps(mesh, put_batch))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
