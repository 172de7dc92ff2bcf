module msso-bench

go 1.19

require msso v0.0.0

replace msso => ../../clients/go
