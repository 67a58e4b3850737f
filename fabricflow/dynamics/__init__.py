"""Network dynamics over a fabric and its routes: flow completion times (fluid or packet
fidelity, :mod:`.flow_completion`), congestion control and PFC (:mod:`.congestion`), their
summaries (:mod:`.summaries`), gradient tuning of CC parameters (:mod:`.tuning`) and the
small scenario fabrics CC studies run on (:mod:`.scenarios`)."""
