"""Max-min fair rates: the jitted kernel, the checked API, certificate and reports."""
