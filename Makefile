.PHONY: install report test

install:
	bash scripts/install.sh

report: install
	multidraft report --out report --force

test: install
	python3 -m pytest -n 2 -p no:cacheprovider
