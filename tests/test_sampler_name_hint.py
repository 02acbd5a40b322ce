"""Names in error messages: an unknown sampler name suggests the registered ones it is closest to
(before: only the full list); a type name takes its article."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("name,hint", [("specdecode", "(did you mean 'specdec'?)"), ("Speculative", "'speculative'"),
                                       ("spec-tree", "'spec_tree'"), ("maskgct", "'maskgct_s2a' or 'maskgct_t2s'")])
def test_an_unknown_sampler_name_suggests_the_closest(name, hint):
    from leapgen.errors import UnknownSamplerError
    from leapgen.samplers import get_sampler

    with pytest.raises(UnknownSamplerError) as err:
        get_sampler(name)
    assert hint in str(err.value) and "registered samplers:" in str(err.value)


def test_type_names_in_messages_take_their_article():
    # before: "prompt 1 is a int, expected a string."
    import numpy as np

    from leapgen.errors import a_type

    assert [a_type(x) for x in (1, "s", np.zeros(1), None, [], {})] == ["an int", "a str", "an ndarray", "None", "a list",
                                                                           "a dict"]
