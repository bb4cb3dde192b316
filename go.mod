module github.com/gustws/gust

go 1.24
