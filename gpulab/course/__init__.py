"""The course's own tooling, apart from what the notebooks teach: the ``gpulab`` command (``cli``), the
environment report behind ``gpulab doctor`` and ``gpulab preflight`` (``environment``, printed by
``environment_report``) and the teacher's answer key (``answer_key``). Teaching code never imports this package.
"""
