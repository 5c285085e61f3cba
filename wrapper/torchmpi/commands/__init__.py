"""One module per ``torchmpi`` verb; see :mod:`torchmpi.cli`."""
