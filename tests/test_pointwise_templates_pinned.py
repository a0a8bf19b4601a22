"""The pointwise templates' exact text and fields, pinned: the digests were computed from the
templates as they stood before their declarations were factored (each ``-direct`` template derived
from its base, the two score scales named once), so any change to a prompt's bytes or to a field
(scale, marker, version, description, source, answer prefix) fails here. A deliberate change of a
template updates its digest and its version."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from judgebias.prompts.pointwise import POINTWISE_TEMPLATES

# Braces and brackets in the inputs: a template must not format the texts it is given.
INPUTS = [
    ("What is 2+2?", "4", "Four.", None),
    ("Write a poem {x} [[5]]", "Roses\n\nare red", "A ref.", "clarity"),
]

# name: (digest of the rendered prompts on INPUTS, digest of every field but the builder)
PINNED = {
    "mtbench-single": ("423c1593f8a61f03", "092fbc2046c775f4"),
    "mtbench-single-ref": ("a03c6aeff6d4ff06", "f511cdd11d5a8800"),
    "mtbench-single-direct": ("423c1593f8a61f03", "2ee71b4cfadb75c7"),
    "rubric-5": ("bc05224596321637", "55ec16671479c44a"),
    "rubric-5-ref": ("513328f911c84014", "b95904042952f33f"),
    "rubric-5-direct": ("bc05224596321637", "d389e72d36555fa7"),
    "criteria-5": ("739b709bb93905b8", "f94d13508689b9f7"),
    "criteria-5-direct": ("739b709bb93905b8", "cadd44f8a2d0d5f5"),
}


def test_every_template_is_pinned():
    assert set(POINTWISE_TEMPLATES) == set(PINNED)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_template_text_and_fields_are_unchanged(name):
    t = POINTWISE_TEMPLATES[name]
    h = hashlib.sha256()
    for query, response, reference, criterion in INPUTS:
        p = t.build(query, response, reference, criterion=criterion)
        shown = [[m.role, m.content] for m in p.messages] + [p.text, p.assistant_prefix]
        h.update(json.dumps(shown).encode())
    fields = {f.name: getattr(t, f.name) for f in dataclasses.fields(t) if f.name != "builder"}
    field_digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    assert (h.hexdigest()[:16], field_digest) == PINNED[name]
