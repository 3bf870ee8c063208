"""A small shop whose cart lives on the server; the verifier compares that cart (and the answer) to the task."""

import html

from studio_sdk.browser import BrowserEnvironment, Request, StaticSite, redirect, respond

PRODUCTS = {
    "red-mug": ("Red Mug", "8.90", "mugs"),
    "blue-mug": ("Blue Mug", "8.90", "mugs"),
    "wool-socks": ("Wool Socks", "12.00", "clothes"),
    "cotton-socks": ("Cotton Socks", "6.50", "clothes"),
    "notebook-a4": ("Notebook A4", "4.20", "paper"),
    "notebook-a5": ("Notebook A5", "3.10", "paper"),
    "notebook-leather": ("Leather Notebook", "19.00", "paper"),
    "walnut-desk": ("Walnut Desk", "349.00", "furniture"),
}


def layout(title, body, cart_count):
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<link rel='stylesheet' href='/style.css'></head><body>"
        f"<nav><a href='/'>Shop</a><a href='/cart'>Cart ({cart_count})</a></nav>"
        "<form method='get' action='/'><input type='search' name='q' aria-label='Search products'>"
        "<button type='submit'>Search</button></form>"
        f"<h1>{html.escape(title)}</h1>{body}</body></html>"
    )


class Shop(BrowserEnvironment):
    def make_site(self, task, seed):
        self.cart = dict(task.get("start_cart") or {})  # the server's state: what the verifier reads
        static = StaticSite(self.site_dir)

        def page(start_response, title, body):
            return respond(start_response, layout(title, body, sum(self.cart.values())))

        def app(environ, start_response):
            request = Request(environ)
            path = request.path
            if path == "/":
                query = request.query.get("q", "").strip().lower()
                found = [(sku, p) for sku, p in PRODUCTS.items() if query in p[0].lower() or query == p[2]]
                items = "".join(
                    f"<li><a href='/product/{sku}'>{html.escape(name)}</a> <span class='price'>€{price}</span></li>"
                    for sku, (name, price, _) in found
                )
                heading = f"Results for “{query}”" if query else "All products"
                return page(start_response, heading, f"<ul class='products'>{items or '<li>No products found</li>'}</ul>")
            if path.startswith("/product/") and path[len("/product/"):] in PRODUCTS:
                sku = path[len("/product/"):]
                name, price, category = PRODUCTS[sku]
                body = (
                    f"<p class='price'>Price: €{price}</p><p>Category: {category}</p>"
                    f"<form method='post' action='/cart/add'><input type='hidden' name='sku' value='{sku}'>"
                    "<label>Quantity <input type='number' name='qty' value='1' min='1' max='9'></label>"
                    "<button type='submit'>Add to cart</button></form>"
                )
                return page(start_response, name, body)
            if path == "/cart/add" and request.method == "POST":
                sku = request.form.get("sku", "")
                try:
                    qty = int(request.form.get("qty", "1"))
                except ValueError:
                    qty = 0
                if sku in PRODUCTS and 1 <= qty <= 9:
                    self.cart[sku] = self.cart.get(sku, 0) + qty
                return redirect(start_response, "/cart")
            if path == "/cart/remove" and request.method == "POST":
                self.cart.pop(request.form.get("sku", ""), None)
                return redirect(start_response, "/cart")
            if path == "/cart":
                rows = "".join(
                    f"<li>{html.escape(PRODUCTS[sku][0])} × {qty} "
                    f"<form method='post' action='/cart/remove' style='display:inline'>"
                    f"<input type='hidden' name='sku' value='{sku}'>"
                    f"<button type='submit' aria-label='Remove {html.escape(PRODUCTS[sku][0])}'>Remove</button></form></li>"
                    for sku, qty in sorted(self.cart.items())
                )
                return page(start_response, "Your cart", f"<ul>{rows or '<li>The cart is empty</li>'}</ul>")
            return static(environ, start_response)

        return app

    def verify(self):
        if "answer" in self.task:
            given = str(self.answer or "").strip().lstrip("€").strip()
            try:
                right = abs(float(given) - float(self.task["answer"])) < 0.005
            except ValueError:
                right = False
            if not right:
                return 0.0, f"answered {self.answer!r}; the price is {self.task['answer']}"
        want = {sku: qty for sku, qty in (self.task.get("want") or {}).items() if qty}
        if self.cart != want:
            return 0.0, f"the cart holds {self.cart or 'nothing'}; the task wants {want or 'nothing'}"
        return 1.0, "the answer is right" if "answer" in self.task else f"the cart holds exactly {want}"
