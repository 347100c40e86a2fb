"""The job kernel: what every kind of work a worker does (run attempts, analyses, evaluations, endpoints, and the
kinds to come) shares — lifecycles as data with one guarded `transition`, one lease implementation, declared
recovery, one device-grant path, the executor protocol, and the effects a transition has after its commit.

A kind declares itself in its own package (`optimize.<package>.job`); the kernel names none, and knows the kinds
the server registers with it (`jobs.registry`, from `api.kinds`).
"""
