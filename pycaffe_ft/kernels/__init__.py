"""Numba kernels: pure ``@njit(cache=True)`` functions, arrays in, outputs passed in.

Compile time (what a user waits for on the first run after installing, and whenever a net
needs a kernel not compiled before) follows three rules here:

- A body inlined by Numba (``inline='always'``) is copied into its caller as Numba IR, and
  Numba copies each block of it with all of the body's variables: the cost grows with the
  square of the body's size. A large body inlined into a kernel therefore does not inline its
  own helpers first: it takes them as arguments (``windows``, ``six_by_two``, ...), and Numba
  inlines each into the kernel itself, copying only the helper (LeNet's 2 x 2 max pooling
  kernel: 2.8 -> 1.4 s to compile, the same machine code).
- A helper that does a lot of work per call (a plane group's transpose, a register block of a
  product, one line of a Winograd transform) is a plain ``@njit`` function, compiled once per
  signature instead of once per call site; LLVM may still inline it. Constant arguments at a
  call site give it a specialization with them as constants (their loops unroll).
- A function compiled only as a callee of cached kernels and taking other jitted functions as
  arguments cannot be cached itself (Numba cannot save such signatures), and passing a jitted
  function as a value to a function that is not inlined makes the caller uncacheable: such
  bodies are inlined, as above. A called helper needs no cache of its own where only cached
  kernels call it (their cache holds its code; ``_to_lanes`` goes without one).
- A vector kernel that still takes a second or more has a reference beside it (a plain loop
  with the same bits, ``direct_conv.forward_reference``; or NumPy, :mod:`.numpy_references`:
  the pooling's, the Winograd convolution's, im2col's, the LRN's), and so do the small kernels
  every training step runs whose bits NumPy can give (the ReLU, the softmax loss's backward, the
  solvers' updates: 0.15-0.6 s of compiling each),
  and its caller asks :func:`.tiered.ready` which to run: on a process's first pass from an
  empty cache the reference runs while a worker process compiles the fast kernel into the cache
  (LeNet's deploy forward + backward: 4.5 -> 1.0-1.3 s on a Zen 5 core).
"""
