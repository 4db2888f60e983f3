"""The command-line tools of ``python -m jax_aclnn {train,bench,info}`` (the
``jax-aclnn`` script): the training job, the benchmark, the install report,
and what they share (argument types, the CSV reader, the training-step
memory table).

They are not the library: ``import jax_aclnn`` never imports this package
(only ``jax_aclnn.__main__``, their entry point, does), and they use only
jax_aclnn's public API. Their third-party packages come with the ``cli``
extra (``pip install "jax_aclnn[cli]"``).
"""
