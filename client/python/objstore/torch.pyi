# Types of objstore.torch (see torch.py).
from typing import Any, Dict, Optional, Union

import torch

from . import Client, Id, Meta

def put_state_dict(client: Client, id: Id, state: Union[torch.nn.Module, Dict[str, Any]],
                   meta: Meta = ...) -> None: ...
def get_state_dict(client: Client, id: Id, timeout: Optional[float] = ...,
                   copy: bool = ...) -> Dict[str, Any]: ...
def load_state_dict(client: Client, id: Id, module: torch.nn.Module, strict: bool = ...,
                    timeout: Optional[float] = ...) -> Any: ...
