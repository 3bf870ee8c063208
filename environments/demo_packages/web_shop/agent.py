"""Shops by reading the text view: search, open the product, set the quantity, add; reads prices."""

import re

plan = []
task = {}


def reset(new_task, seed):
    global task, plan
    task = new_task
    plan = []


def find(text, pattern):
    match = re.search(r"^\[(\d+)\] " + pattern, text, re.M)
    return int(match.group(1)) if match else None


def links(text):
    """(id, name, href, price) of the product links on a listing page."""
    found = []
    for match in re.finditer(r'^\[(\d+)\] link "([^"]+)" -> (/product/\S+)\n€([\d.]+)', text, re.M):
        found.append((int(match.group(1)), match.group(2), match.group(3), float(match.group(4))))
    return found


def act(observation, info):
    text, url, prompt = observation["text"], observation["url"], observation["task"]
    if task["id"] == "desk-price":
        if url.startswith("/product/walnut-desk"):
            return {"action": "done", "answer": re.search(r"Price: €([\d.]+)", text).group(1)}
        return {"action": "goto", "url": "/?q=walnut"} if "walnut" not in url else {"action": "click", "id": links(text)[0][0]}
    if task["id"] == "cheapest-notebook" and "Blue Mug ×" in text:
        if url != "/cart":
            return {"action": "goto", "url": "/cart"}
        return {"action": "click", "id": find(text, r'button "Remove"')}
    (sku, qty), = task["want"].items()
    if url == "/cart" and re.search(r"× \d", text):
        return {"action": "done", "answer": "added"}
    if url.startswith("/product/"):
        if sku not in url:
            return {"action": "goto", "url": "/"}
        quantity = find(text, "input\\[number\\] name=qty")
        if f'value="{qty}"' not in text:
            return {"action": "fill", "id": quantity, "value": str(qty)}
        return {"action": "click", "id": find(text, r'button "Add to cart"')}
    query = {"red-mug": "mug", "wool-socks": "socks", "notebook-a5": "notebook"}[sku]
    if f"Results for “{query}”" not in text:
        box = find(text, r'input\[search\] name=q')
        if f'value="{query}"' not in text:
            return {"action": "fill", "id": box, "value": query}
        return {"action": "press", "id": box, "key": "Enter"}
    candidates = links(text)
    if sku == "notebook-a5":
        choice = min(candidates, key=lambda c: c[3])  # "the cheapest notebook"
    else:
        choice = next(c for c in candidates if c[2].endswith(sku))
    return {"action": "click", "id": choice[0]}
