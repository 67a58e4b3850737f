"""The design-review report: one job on one fabric, computed section by section
(:mod:`.build`), its cost section (:mod:`.cost_section`) and the self-contained HTML page
(:mod:`.html`)."""
