from mlflow_perfgate.cli import entry

if __name__ == "__main__":
    entry()
