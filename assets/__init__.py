"""Shipped tiny pipelines (installed as the ``leapgen_assets`` package); see leapgen.pipelines.base."""
