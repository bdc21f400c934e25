

fuzz-model
Khe0È:req-1@