module github.com/gustws/gust

go 1.25

require (
	github.com/klauspost/compress v1.20.3
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
