module floodgate/ratelimitheaders

go 1.22
