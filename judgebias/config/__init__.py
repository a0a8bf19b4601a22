"""An experiment described in one YAML file (``experiment``), its generators and judges (``models``),
its sections' base rules (``base``), the optional stages (``stages``) and command-line overrides
(``overrides``)."""
