from enum import Enum


class LLMRole(Enum):
    PROMPT = 1
    DECODER = 2
    MIX = 3


class LLMClusterInfo:
    def __init__(self):
        self.remote_cluster_id = 0
