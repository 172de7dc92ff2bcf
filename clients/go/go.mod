module msso

go 1.19
