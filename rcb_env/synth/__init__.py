"""Stage: training tasks synthesised from the papers' own code, kept apart from the test set
(``rcb-env synth``): proposal over what the tests execute (:mod:`.coverage`,
:mod:`.propose`), verification by the model-free checks, the written pset and its manifest
(:mod:`.run`, :mod:`.manifest`)."""
